package queueflow_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	queueflow "github.com/unofficial-queueflow/client-go"
)

// pushHandler is a push receiver on net/http: QueueFlow POSTs each job of a bound queue to it.
// The answer decides the job's outcome: a 2xx JSON body completes it with that body as its result,
// a 5xx (or 408, 409, 425, 429) retries it, any other 4xx fails it for good. A delivery that
// fails verification gets a 503 with a Retry-After.
func pushHandler(verifier *queueflow.PushVerifier) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 10<<20)) // the raw bytes: the signature covers them
		if err != nil {
			http.Error(w, "cannot read the body", http.StatusRequestEntityTooLarge)
			return
		}
		delivery, err := verifier.Verify(r.Header, body)
		var refused *queueflow.PushVerifyError
		if errors.As(err, &refused) {
			// 503, not 401: a wrong or undeployed secret must not dead-letter real jobs (docs/push.md).
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": string(refused.Reason)})
			return
		}
		if delivery.Job.TaskName != "send-welcome" {
			http.Error(w, "no such task", http.StatusUnprocessableEntity)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"sent_to": delivery.Job.Payload["to"]})
	})
}

// A net/http push receiver (pushHandler above) serving the endpoint registered with
// POST /api/v1/push-endpoints, whose secret it was given.
func ExamplePushVerifier() {
	verifier, err := queueflow.NewPushVerifier(os.Getenv("QUEUEFLOW_PUSH_SECRET")) // "whsec_..."
	if err != nil {
		log.Fatal(err) // a malformed secret fails here, at start-up
	}
	http.Handle("POST /queueflow", pushHandler(verifier))
	// log.Fatal(http.ListenAndServe(":8080", nil))
}

// signedDelivery is a delivery as the server signs one (written from the spec, not with the SDK).
func signedDelivery(t *testing.T, url, secret, body string, stamp int64) *http.Request {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(stamp, 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("d-1." + ts + "." + body))
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", "d-1")
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return req
}

func TestThePushHandlerExample(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the endpoint's secret"))
	verifier, err := queueflow.NewPushVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(pushHandler(verifier))
	defer srv.Close()
	body := `{"job":{"id":"j-1","queue_name":"emails","task_name":"send-welcome","payload":{"to":"zoë@example.com"},` +
		`"config":{},"status":"running","retry_count":0,"delivery_count":1,"created_at":"2026-01-01T00:00:00Z",` +
		`"scheduled_at":"2026-01-01T00:00:00Z","metadata":{}},"lease_token":"lt-1","attempt":1}`
	now := time.Now().Unix()
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another endpoint"))

	for _, c := range []struct {
		name       string
		req        *http.Request
		status     int
		retryAfter string
		answer     string
	}{
		{"signed now", signedDelivery(t, srv.URL, secret, body, now), 200, "", `{"sent_to":"zoë@example.com"}`},
		{"an hour old", signedDelivery(t, srv.URL, secret, body, now-3600), 503, "60", `{"error":"timestamp_too_old"}`},
		{"another secret", signedDelivery(t, srv.URL, other, body, now), 503, "60", `{"error":"signature_mismatch"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.DefaultClient.Do(c.req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			answer, _ := io.ReadAll(resp.Body)
			got := resp.Header.Get("Retry-After")
			if resp.StatusCode != c.status || got != c.retryAfter || strings.TrimSpace(string(answer)) != c.answer {
				t.Fatalf("got %d (Retry-After %q) %s, want %d (%q) %s",
					resp.StatusCode, got, answer, c.status, c.retryAfter, c.answer)
			}
		})
	}

	tampered := signedDelivery(t, srv.URL, secret, body, now)
	tampered.Body = io.NopCloser(strings.NewReader(strings.Replace(body, `"attempt":1`, `"attempt":2`, 1)))
	resp, err := http.DefaultClient.Do(tampered)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "60" || !strings.Contains(string(answer), "signature_mismatch") {
		t.Fatalf("a tampered body got %d (Retry-After %q) %s", resp.StatusCode, resp.Header.Get("Retry-After"), answer)
	}
}
