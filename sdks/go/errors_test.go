package queueflow

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestDecodeAPIErrorWithBody(t *testing.T) {
	raw := []byte(`{"error":"job not found: x","timestamp":"2026-01-01T00:00:00Z"}`)
	e := decodeAPIError(404, raw, "GET", "/api/v1/jobs/x")
	if e.Status != 404 || e.Body.Error != "job not found: x" || e.Body.Timestamp != "2026-01-01T00:00:00Z" {
		t.Fatalf("decoded %+v", e)
	}
	if !e.HasBody() {
		t.Fatal("HasBody false")
	}
	if got := e.Error(); got != "queueflow: GET /api/v1/jobs/x: 404: job not found: x" {
		t.Fatalf("Error() = %q", got)
	}
}

func TestDecodeAPIErrorWithoutBody(t *testing.T) {
	e := decodeAPIError(502, []byte("<html>bad gateway</html>"), "POST", "/x")
	if e.HasBody() || e.Body.Error != "" || string(e.Raw) != "<html>bad gateway</html>" {
		t.Fatalf("decoded %+v", e)
	}
	if e.Error() != "queueflow: POST /x: 502: <html>bad gateway</html>" {
		t.Fatalf("Error() = %q", e.Error())
	}
	if decodeAPIError(503, nil, "", "").Error() != "queueflow: 503: Service Unavailable" {
		t.Fatal("empty body message")
	}
	// Wrong types are not a body.
	if decodeAPIError(400, []byte(`{"error": 3, "timestamp": null}`), "", "").HasBody() {
		t.Fatal("non-string fields taken as a body")
	}
}

func TestHelpersThroughWrapping(t *testing.T) {
	cases := []struct {
		status int
		is     func(error) bool
	}{
		{400, IsBadRequest}, {401, IsUnauthorized}, {403, IsForbidden}, {404, IsNotFound},
		{409, IsConflict}, {413, IsPayloadTooLarge}, {500, IsServerError}, {503, IsServerError},
	}
	for _, c := range cases {
		err := fmt.Errorf("context: %w", &APIError{Status: c.status})
		if !c.is(err) {
			t.Errorf("status %d not recognised", c.status)
		}
		if StatusOf(err) != c.status {
			t.Errorf("StatusOf = %d", StatusOf(err))
		}
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.Status != c.status {
			t.Errorf("errors.As failed for %d", c.status)
		}
	}
	if IsNotFound(errors.New("plain")) || StatusOf(nil) != 0 {
		t.Fatal("plain errors carry no status")
	}
	if !IsAuthError(&APIError{Status: 401}) || !IsAuthError(&APIError{Status: 403}) || IsAuthError(&APIError{Status: 404}) {
		t.Fatal("IsAuthError")
	}
}

func TestIsTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("connection refused"), true},
		{&APIError{Status: 500}, true},
		{&APIError{Status: 429}, true},
		{&APIError{Status: 408}, true},
		{&APIError{Status: 409}, false},
		{&APIError{Status: 401}, false},
		{fmt.Errorf("x: %w", context.Canceled), false},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
	} {
		if got := IsTransient(c.err); got != c.want {
			t.Errorf("IsTransient(%v) = %v", c.err, got)
		}
	}
}

func TestPermanent(t *testing.T) {
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) must be nil")
	}
	base := errors.New("invalid input")
	err := fmt.Errorf("handler: %w", Permanent(base))
	if !IsPermanent(err) || !errors.Is(err, base) {
		t.Fatal("Permanent lost in wrapping")
	}
	if Permanent(base).Error() != "invalid input" {
		t.Fatal("message changed")
	}
	if IsPermanent(base) {
		t.Fatal("plain error is permanent")
	}
}

func TestClientReturnsAPIErrorFromServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(409)
		w.Write([]byte(`{"error":"job is already cancelled","timestamp":"2026-01-01T00:00:00.5Z"}`))
	}))
	defer srv.Close()
	err := NewClient(srv.URL, "t").CancelJob(context.Background(), "abc")
	if !IsConflict(err) {
		t.Fatalf("got %v", err)
	}
	apiErr, _ := AsAPIError(err)
	if apiErr.Body.Error != "job is already cancelled" || !apiErr.HasBody() {
		t.Fatalf("body %+v", apiErr.Body)
	}
}
