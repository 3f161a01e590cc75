package queueflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrorBody is the server's error body: {"error": "...", "timestamp": "..."}.
type ErrorBody struct {
	Error     string `json:"error"`
	Timestamp string `json:"timestamp"`
}

// APIError is returned for every HTTP response with a status of 400 or more. Body holds the
// server's error body when it sent one; Raw holds the response body as received.
type APIError struct {
	Status int
	Body   ErrorBody
	Raw    []byte
	Method string
	Path   string
}

func (e *APIError) Error() string {
	msg := e.Body.Error
	if msg == "" {
		msg = strings.TrimSpace(string(e.Raw))
		if len(msg) > 200 {
			msg = msg[:200]
		}
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Method != "" {
		return fmt.Sprintf("queueflow: %s %s: %d: %s", e.Method, e.Path, e.Status, msg)
	}
	return fmt.Sprintf("queueflow: %d: %s", e.Status, msg)
}

// HasBody reports whether the server sent its {error, timestamp} body.
func (e *APIError) HasBody() bool { return e.Body.Error != "" && e.Body.Timestamp != "" }

// decodeAPIError builds the APIError of a failed response from its status and body.
func decodeAPIError(status int, raw []byte, method, path string) *APIError {
	e := &APIError{Status: status, Raw: raw, Method: method, Path: path}
	var probe map[string]json.RawMessage
	if json.Unmarshal(raw, &probe) == nil {
		_ = json.Unmarshal(probe["error"], &e.Body.Error)
		_ = json.Unmarshal(probe["timestamp"], &e.Body.Timestamp)
	}
	return e
}

// AsAPIError returns the *APIError in err's chain, if any.
func AsAPIError(err error) (*APIError, bool) {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr, true
	}
	return nil, false
}

// StatusOf returns the HTTP status carried by err, or 0 when err is not an API error.
func StatusOf(err error) int {
	if e, ok := AsAPIError(err); ok {
		return e.Status
	}
	return 0
}

func hasStatus(err error, status int) bool { return StatusOf(err) == status }

// IsBadRequest reports a 400 (validation error).
func IsBadRequest(err error) bool { return hasStatus(err, http.StatusBadRequest) }

// IsUnauthorized reports a 401 (missing or unknown credential).
func IsUnauthorized(err error) bool { return hasStatus(err, http.StatusUnauthorized) }

// IsForbidden reports a 403 (the credential may not use this route).
func IsForbidden(err error) bool { return hasStatus(err, http.StatusForbidden) }

// IsAuthError reports a 401 or a 403.
func IsAuthError(err error) bool { return IsUnauthorized(err) || IsForbidden(err) }

// IsNotFound reports a 404.
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsConflict reports a 409 (for the worker protocol: the lease is no longer held).
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

// IsPayloadTooLarge reports a 413.
func IsPayloadTooLarge(err error) bool { return hasStatus(err, http.StatusRequestEntityTooLarge) }

// IsServerError reports a 5xx.
func IsServerError(err error) bool { return StatusOf(err) >= 500 }

// IsTransient reports an error worth retrying later: a transport failure (no HTTP answer),
// a 5xx, a 408 or a 429. Cancellation (context.Canceled) is not transient.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if e, ok := AsAPIError(err); ok {
		return e.Status >= 500 || e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests
	}
	return true
}

// PermanentError marks a handler error as non-retryable: the worker reports it with
// retryable=false and the job is dead-lettered at once.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent failure"
	}
	return e.Err.Error()
}

func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that a Worker fails the job without retry. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
