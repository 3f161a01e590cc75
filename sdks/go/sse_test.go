package queueflow

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSSEReaderFields(t *testing.T) {
	stream := ": keep-alive\n\n" +
		"event: status\ndata: {\"a\":\ndata: 1}\nid: 7\nretry: 1500\n\n" +
		"data:no-space\r\n\r\n" +
		"event: other\n\n" + // no data: not dispatched
		"data: tail-without-blank-line\n"
	r := NewSSEReader(strings.NewReader(stream))
	ev, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Name != "status" || ev.Data != "{\"a\":\n1}" || ev.ID != "7" || ev.Retry != 1500 {
		t.Fatalf("first event %+v", ev)
	}
	ev, err = r.Next()
	if err != nil || ev.Data != "no-space" || ev.Name != "" {
		t.Fatalf("second event %+v %v", ev, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("an unterminated event must be dropped, got %v", err)
	}
}

func TestSSEReaderEmptyAndCommentsOnly(t *testing.T) {
	if _, err := NewSSEReader(strings.NewReader("")).Next(); err != io.EOF {
		t.Fatal(err)
	}
	if _, err := NewSSEReader(strings.NewReader(": a\n\n: b\n\n")).Next(); err != io.EOF {
		t.Fatal(err)
	}
}

const jobEvents = "event: status\ndata: {\"id\":\"j1\",\"status\":\"pending\",\"payload\":{},\"config\":{},\"metadata\":{}," +
	"\"queue_name\":\"q\",\"task_name\":\"t\",\"retry_count\":0,\"delivery_count\":0," +
	"\"created_at\":\"2026-01-01T00:00:00Z\",\"scheduled_at\":\"2026-01-01T00:00:00.123456Z\"}\n\n" +
	": keep-alive\n\n" +
	"event: status\ndata: {\"id\":\"j1\",\"status\":\"completed\",\"result\":{\"ok\":true}," +
	"\"created_at\":\"2026-01-01T00:00:00Z\",\"scheduled_at\":\"2026-01-01T00:00:00Z\"}\n\n"

func TestStreamNextAndAll(t *testing.T) {
	s := newStreamFrom[Job](io.NopCloser(strings.NewReader(jobEvents)))
	var statuses []string
	for job, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, job.Status)
	}
	if strings.Join(statuses, ",") != "pending,completed" {
		t.Fatalf("statuses %v", statuses)
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

func TestStreamChanAndBadData(t *testing.T) {
	s := newStreamFrom[Job](io.NopCloser(strings.NewReader(jobEvents + "event: status\ndata: {not json\n\n")))
	n := 0
	for job := range s.Chan() {
		if job.ID != "j1" {
			t.Fatalf("job %+v", job)
		}
		n++
	}
	if n != 2 || s.Err() == nil {
		t.Fatalf("n=%d err=%v", n, s.Err())
	}
}

func TestJobEventsOverHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/jobs/missing/events" {
			w.WriteHeader(404)
			w.Write([]byte(`{"error":"job not found: missing","timestamp":"2026-01-01T00:00:00Z"}`))
			return
		}
		if r.Header.Get("Accept") != "text/event-stream" || r.Header.Get("Authorization") != "Bearer tenant" {
			w.WriteHeader(400)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte(jobEvents))
	}))
	defer srv.Close()
	c := NewClient(srv.URL, "tenant")
	if _, err := c.JobEvents(context.Background(), "missing"); !IsNotFound(err) {
		t.Fatalf("want 404, got %v", err)
	}
	s, err := c.JobEvents(context.Background(), "j1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.Next()
	if err != nil || first.Status != "pending" {
		t.Fatalf("%v %v", first, err)
	}
	second, err := s.Next()
	if err != nil || second.Status != "completed" || second.Result["ok"] != true {
		t.Fatalf("%v %v", second, err)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}

func TestWorkflowEventsDecode(t *testing.T) {
	body := "event: status\ndata: {\"workflow_id\":\"w\",\"status\":\"running\",\"steps\":[{\"name\":\"a\",\"status\":\"completed\"}]}\n\n"
	s := newStreamFrom[WorkflowEvent](io.NopCloser(strings.NewReader(body)))
	ev, err := s.Next()
	if err != nil || ev.WorkflowID != "w" || len(ev.Steps) != 1 || ev.Steps[0].Status != "completed" {
		t.Fatalf("%+v %v", ev, err)
	}
}
