package queueflow

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultPushTolerance is how far a push delivery's timestamp may be from the receiver's clock,
// before or after.
const DefaultPushTolerance = 5 * time.Minute

// PushRejection says why a push delivery (or the secret to check it with) was refused; the same
// values in every SDK (sdks/conformance/push/README.md).
type PushRejection string

const (
	PushMalformedSecret   PushRejection = "malformed_secret"
	PushMissingHeader     PushRejection = "missing_header"
	PushMalformedHeader   PushRejection = "malformed_header"
	PushTimestampTooOld   PushRejection = "timestamp_too_old"
	PushTimestampTooNew   PushRejection = "timestamp_too_new"
	PushSignatureMismatch PushRejection = "signature_mismatch"
	PushMalformedBody     PushRejection = "malformed_body"
)

// PushVerifyError is the error of NewPushVerifier and PushVerifier.Verify: Reason is the
// machine-readable cause, Detail says more.
type PushVerifyError struct {
	Reason PushRejection
	Detail string
}

func (e *PushVerifyError) Error() string {
	return fmt.Sprintf("queueflow: push delivery refused (%s): %s", e.Reason, e.Detail)
}

func pushRefused(reason PushRejection, format string, args ...any) *PushVerifyError {
	return &PushVerifyError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// PushDelivery is a verified push delivery.
type PushDelivery struct {
	// ID is the webhook-id: the delivery's id, the same on every retry of one attempt (use it to
	// drop a duplicate).
	ID string
	// Timestamp is when QueueFlow sent it (webhook-timestamp).
	Timestamp time.Time
	// Job is the job, as a lease answer carries it.
	Job Job
	// LeaseToken is the job's lease: pass it to Heartbeat, Complete or Fail after answering 202.
	LeaseToken string
	// Attempt is which attempt of the job this is.
	Attempt int
	// Traceparent is the job's W3C traceparent header, empty when it has none.
	Traceparent string
}

// PushVerifier checks push deliveries signed with one endpoint secret (whsec_<base64>): their
// Standard Webhooks signature (HMAC-SHA256, compared in constant time; any one of several v1
// entries may match, as during a secret rotation) and their timestamp. It is safe for concurrent
// use.
type PushVerifier struct {
	key       []byte
	tolerance time.Duration
}

// PushOption configures a PushVerifier.
type PushOption func(*PushVerifier)

// WithPushTolerance replaces DefaultPushTolerance.
func WithPushTolerance(d time.Duration) PushOption {
	return func(v *PushVerifier) { v.tolerance = d }
}

// NewPushVerifier makes a verifier for the endpoint secret; a secret that is not whsec_ followed
// by standard base64 is a *PushVerifyError with Reason PushMalformedSecret.
func NewPushVerifier(secret string, opts ...PushOption) (*PushVerifier, error) {
	encoded, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, pushRefused(PushMalformedSecret, "a push secret starts with whsec_")
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	// Canonical standard base64 only, so that every SDK accepts exactly the same secrets.
	if err != nil || len(key) == 0 || base64.StdEncoding.EncodeToString(key) != encoded {
		return nil, pushRefused(PushMalformedSecret, "the part after whsec_ is not standard base64 with padding")
	}
	v := &PushVerifier{key: key, tolerance: DefaultPushTolerance}
	for _, opt := range opts {
		opt(v)
	}
	return v, nil
}

// Verify checks a delivery's headers and raw body (the bytes exactly as received: the signature
// covers them, not their JSON) against the current time and returns the delivery. Every failure
// is a *PushVerifyError.
func (v *PushVerifier) Verify(h http.Header, body []byte) (*PushDelivery, error) {
	return v.VerifyAt(h, body, time.Now())
}

// VerifyAt is Verify with the clock given (for tests).
func (v *PushVerifier) VerifyAt(h http.Header, body []byte, now time.Time) (*PushDelivery, error) {
	id, err := requiredHeader(h, "webhook-id")
	if err != nil {
		return nil, err
	}
	stamp, err := requiredHeader(h, "webhook-timestamp")
	if err != nil {
		return nil, err
	}
	signatures, err := requiredHeader(h, "webhook-signature")
	if err != nil {
		return nil, err
	}

	if len(stamp) > 15 || strings.Trim(stamp, "0123456789") != "" {
		return nil, pushRefused(PushMalformedHeader, "webhook-timestamp is not whole Unix seconds")
	}
	seconds, _ := strconv.ParseInt(stamp, 10, 64) // 1 to 15 digits: always fits
	var candidates []string
	for _, entry := range strings.Split(signatures, " ") {
		if entry == "" {
			continue
		}
		version, value, found := strings.Cut(entry, ",")
		if !found || version == "" {
			return nil, pushRefused(PushMalformedHeader, "a webhook-signature entry is not <version>,<signature>")
		}
		if version == "v1" {
			candidates = append(candidates, value)
		}
	}

	sent := time.Unix(seconds, 0)
	if sent.Before(now.Add(-v.tolerance)) {
		return nil, pushRefused(PushTimestampTooOld, "sent at %d, more than %s ago", seconds, v.tolerance)
	}
	if sent.After(now.Add(v.tolerance)) {
		return nil, pushRefused(PushTimestampTooNew, "sent at %d, more than %s ahead", seconds, v.tolerance)
	}

	mac := hmac.New(sha256.New, v.key)
	mac.Write([]byte(id + "." + stamp + "."))
	mac.Write(body)
	expected := []byte(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	matched := false
	for _, candidate := range candidates { // every candidate, each compared in constant time
		if hmac.Equal(expected, []byte(candidate)) {
			matched = true
		}
	}
	if !matched {
		return nil, pushRefused(PushSignatureMismatch, "no v1 signature matches this endpoint's secret")
	}

	var decoded struct {
		Job        *Job    `json:"job"`
		LeaseToken *string `json:"lease_token"`
		Attempt    *int    `json:"attempt"`
	}
	if err := json.Unmarshal(body, &decoded); err != nil {
		return nil, pushRefused(PushMalformedBody, "the body is not a delivery object: %v", err)
	}
	if decoded.Job == nil || decoded.Job.ID == "" || decoded.LeaseToken == nil || decoded.Attempt == nil {
		return nil, pushRefused(PushMalformedBody, "the body lacks job (with its id), lease_token or attempt")
	}
	return &PushDelivery{
		ID:          id,
		Timestamp:   sent,
		Job:         *decoded.Job,
		LeaseToken:  *decoded.LeaseToken,
		Attempt:     *decoded.Attempt,
		Traceparent: lookupHeader(h, "traceparent"),
	}, nil
}

// lookupHeader is h.Get, and also finds a name not in canonical form (a map built by hand, say
// from a serverless event's headers).
func lookupHeader(h http.Header, name string) string {
	if value := h.Get(name); value != "" {
		return value
	}
	for key, values := range h {
		if strings.EqualFold(key, name) && len(values) > 0 {
			return values[0]
		}
	}
	return ""
}

func requiredHeader(h http.Header, name string) (string, error) {
	value := lookupHeader(h, name)
	if strings.Trim(value, " ") == "" {
		return "", pushRefused(PushMissingHeader, "no %s header", name)
	}
	return value, nil
}
