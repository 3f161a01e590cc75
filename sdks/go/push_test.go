package queueflow

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"reflect"
	"testing"
	"time"
)

// The shared vectors (sdks/conformance/push/vectors.json), which every SDK's verifier passes.
type pushVectors struct {
	ToleranceSecs int          `json:"tolerance_secs"`
	Cases         []pushVector `json:"cases"`
}

type pushVector struct {
	Name    string            `json:"name"`
	Secret  string            `json:"secret"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Now     int64             `json:"now"`
	Expect  struct {
		Valid    bool           `json:"valid"`
		Reason   string         `json:"reason"`
		Delivery map[string]any `json:"delivery"`
	} `json:"expect"`
}

func loadPushVectors(t *testing.T) pushVectors {
	t.Helper()
	raw, err := os.ReadFile("../conformance/push/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors pushVectors
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors.Cases) == 0 || vectors.ToleranceSecs != 300 {
		t.Fatalf("unexpected vectors file: %d cases, tolerance %d", len(vectors.Cases), vectors.ToleranceSecs)
	}
	return vectors
}

// headerAsSent keeps the names as the vector spells them (not canonicalised), as a map built from
// a serverless event would.
func headerAsSent(names map[string]string) http.Header {
	h := http.Header{}
	for name, value := range names {
		h[name] = []string{value}
	}
	return h
}

// extraPushVectors are cases in the same format from QF_PUSH_VECTORS_EXTRA=<file>, when set (e.g.
// real deliveries a server test captured).
func extraPushVectors(t *testing.T) []pushVector {
	t.Helper()
	path := os.Getenv("QF_PUSH_VECTORS_EXTRA")
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var extra pushVectors
	if err := json.Unmarshal(raw, &extra); err != nil {
		t.Fatal(err)
	}
	return extra.Cases
}

func TestPushVectors(t *testing.T) {
	for _, c := range append(loadPushVectors(t).Cases, extraPushVectors(t)...) {
		t.Run(c.Name, func(t *testing.T) {
			var delivery *PushDelivery
			v, err := NewPushVerifier(c.Secret)
			if err == nil {
				delivery, err = v.VerifyAt(headerAsSent(c.Headers), []byte(c.Body), time.Unix(c.Now, 0))
			}
			if !c.Expect.Valid {
				var refused *PushVerifyError
				if !errors.As(err, &refused) {
					t.Fatalf("want refusal %q, got %v", c.Expect.Reason, err)
				}
				if string(refused.Reason) != c.Expect.Reason {
					t.Fatalf("want reason %q, got %v", c.Expect.Reason, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			var traceparent any
			if delivery.Traceparent != "" {
				traceparent = delivery.Traceparent
			}
			got := map[string]any{
				"id":          delivery.ID,
				"timestamp":   float64(delivery.Timestamp.Unix()),
				"job_id":      delivery.Job.ID,
				"task_name":   delivery.Job.TaskName,
				"payload":     delivery.Job.Payload,
				"lease_token": delivery.LeaseToken,
				"attempt":     float64(delivery.Attempt),
				"traceparent": traceparent,
			}
			if !reflect.DeepEqual(got, c.Expect.Delivery) {
				t.Fatalf("delivery\n got %v\nwant %v", got, c.Expect.Delivery)
			}
		})
	}
}

func TestPushVerifierRefusesAMalformedSecretWhenBuilt(t *testing.T) {
	_, err := NewPushVerifier("my-secret")
	var refused *PushVerifyError
	if !errors.As(err, &refused) || refused.Reason != PushMalformedSecret {
		t.Fatalf("got %v", err)
	}
}

func TestPushToleranceIsAnOption(t *testing.T) {
	cases := map[string]pushVector{}
	for _, c := range loadPushVectors(t).Cases {
		cases[c.Name] = c
	}
	stale := cases["old_timestamp"] // 301 s old
	v, err := NewPushVerifier(stale.Secret, WithPushTolerance(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.VerifyAt(headerAsSent(stale.Headers), []byte(stale.Body), time.Unix(stale.Now, 0)); err != nil {
		t.Fatalf("a 10-minute tolerance refused a 301 s old delivery: %v", err)
	}
	recent := cases["a_retry_is_a_new_attempt"] // 10 s old
	strict, _ := NewPushVerifier(recent.Secret, WithPushTolerance(5*time.Second))
	_, err = strict.VerifyAt(headerAsSent(recent.Headers), []byte(recent.Body), time.Unix(recent.Now, 0))
	var refused *PushVerifyError
	if !errors.As(err, &refused) || refused.Reason != PushTimestampTooOld {
		t.Fatalf("a 5 s tolerance let a 10 s old delivery through: %v", err)
	}
}

func TestPushDeliveryDecodesTheJob(t *testing.T) {
	for _, c := range loadPushVectors(t).Cases {
		if c.Name != "good_signature" {
			continue
		}
		v, _ := NewPushVerifier(c.Secret)
		d, err := v.VerifyAt(headerAsSent(c.Headers), []byte(c.Body), time.Unix(c.Now, 0))
		if err != nil {
			t.Fatal(err)
		}
		want := time.Date(2025, 12, 31, 23, 59, 58, 123456000, time.UTC)
		if d.Job.Status != "running" || d.Job.DeliveryCount != 1 || !d.Job.CreatedAt.Equal(want) {
			t.Fatalf("job %+v", d.Job)
		}
		return
	}
	t.Fatal("no good_signature case")
}
