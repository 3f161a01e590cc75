package queueflow

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// SSEEvent is one server-sent event as received.
type SSEEvent struct {
	Name  string // the "event:" field; "" when absent (the default "message" type)
	Data  string // the "data:" lines joined by "\n"
	ID    string
	Retry int // milliseconds, 0 when absent
}

// SSEReader parses a text/event-stream (the WHATWG format): fields, multi-line data, comments
// (keep-alives) and CRLF or LF line ends.
type SSEReader struct {
	r *bufio.Reader
}

// NewSSEReader reads events from r.
func NewSSEReader(r io.Reader) *SSEReader { return &SSEReader{r: bufio.NewReader(r)} }

// Next returns the next complete event, or io.EOF at the end of the stream. An event cut off by
// the end of the stream is dropped, as the format requires.
func (s *SSEReader) Next() (SSEEvent, error) {
	var ev SSEEvent
	var data []string
	hasData := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil && (err != io.EOF || line == "") {
			if err == io.EOF {
				return SSEEvent{}, io.EOF
			}
			return SSEEvent{}, err
		}
		atEOF := err == io.EOF
		line = strings.TrimRight(line, "\r\n")
		if atEOF {
			// A last line without its terminator cannot end an event.
			return SSEEvent{}, io.EOF
		}
		if line == "" {
			if hasData {
				ev.Data = strings.Join(data, "\n")
				return ev, nil
			}
			ev = SSEEvent{}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: the keep-alive
		}
		field, value, found := strings.Cut(line, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		switch field {
		case "event":
			ev.Name = value
		case "data":
			data = append(data, value)
			hasData = true
		case "id":
			ev.ID = value
		case "retry":
			if n, err := strconv.Atoi(value); err == nil {
				ev.Retry = n
			}
		}
	}
}

// Stream is an open event stream of values of type T (a Job, or a WorkflowEvent).
type Stream[T any] struct {
	body   io.ReadCloser
	reader *SSEReader
	cancel context.CancelFunc
	err    error
	once   sync.Once
	done   chan struct{}
}

func openStream[T any](ctx context.Context, c *Client, path string) (*Stream[T], error) {
	ctx, cancel := context.WithCancel(ctx)
	resp, err := c.send(ctx, http.MethodGet, path, nil, nil, callOpts{}, "text/event-stream")
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode >= 400 {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, decodeAPIError(resp.StatusCode, raw, http.MethodGet, path)
	}
	return &Stream[T]{body: resp.Body, reader: NewSSEReader(resp.Body), cancel: cancel, done: make(chan struct{})}, nil
}

// newStreamFrom wraps an already open body (used by tests).
func newStreamFrom[T any](body io.ReadCloser) *Stream[T] {
	return &Stream[T]{body: body, reader: NewSSEReader(body), cancel: func() {}, done: make(chan struct{})}
}

// Next returns the next value, or io.EOF once the server ended the stream (after a terminal
// status). Comments and events other than "status" / "message" are skipped.
func (s *Stream[T]) Next() (*T, error) {
	if s.err != nil {
		return nil, s.err
	}
	for {
		ev, err := s.reader.Next()
		if err != nil {
			s.err = err
			return nil, err
		}
		if ev.Name != "" && ev.Name != "status" && ev.Name != "message" {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
			s.err = fmt.Errorf("queueflow: decoding an event: %w", err)
			return nil, s.err
		}
		return &v, nil
	}
}

// All iterates the stream's values until it ends; a failure is yielded once as the error.
// The stream is closed when the loop ends.
func (s *Stream[T]) All() iter.Seq2[*T, error] {
	return func(yield func(*T, error) bool) {
		defer s.Close()
		for {
			v, err := s.Next()
			if err == io.EOF {
				return
			}
			if !yield(v, err) || err != nil {
				return
			}
		}
	}
}

// Chan delivers the stream's values on a channel that is closed when the stream ends; Err then
// tells why (nil for a normal end). The stream is closed when the channel is; Close (or
// cancelling the context) stops a consumer that no longer reads.
func (s *Stream[T]) Chan() <-chan *T {
	ch := make(chan *T)
	go func() {
		defer close(ch)
		defer s.Close()
		for {
			v, err := s.Next()
			if err != nil {
				return
			}
			select {
			case ch <- v:
			case <-s.done:
				return
			}
		}
	}()
	return ch
}

// Err is the error that ended the stream, nil for a normal end (or while it is open).
func (s *Stream[T]) Err() error {
	if s.err == io.EOF {
		return nil
	}
	return s.err
}

// Close ends the stream.
func (s *Stream[T]) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		s.cancel()
		err = s.body.Close()
	})
	return err
}
