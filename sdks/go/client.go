// Package queueflow is an unofficial Go SDK for QueueFlow: typed calls for every route of the REST API and
// the remote-worker protocol, and a Worker that runs the lease / heartbeat / report loop.
package queueflow

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds each request (a lease long-poll gets its wait added on top).
const DefaultTimeout = 30 * time.Second

// Version of this SDK, sent in the User-Agent header.
const Version = "0.1.0"

// Client calls a QueueFlow server. It is safe for concurrent use.
type Client struct {
	baseURL     string
	token       string
	workerToken string
	http        *http.Client
	timeout     time.Duration
	userAgent   string
}

// Option configures a Client.
type Option func(*Client)

// WithWorkerToken sets the credential of the worker-protocol routes (lease, heartbeat, complete,
// fail). Without it they use the tenant token, which only a --dev server accepts.
func WithWorkerToken(token string) Option { return func(c *Client) { c.workerToken = token } }

// WithHTTPClient sets the HTTP client (transport, proxies, TLS). Its own Timeout, if any, also
// applies, so leave it 0 for long-polls and event streams.
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) {
		if h != nil {
			c.http = h
		}
	}
}

// WithTimeout bounds each request; 0 or less disables the bound (the context still applies).
// Event streams are never bounded by it.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithUserAgent overrides the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// pooledHTTP is the HTTP client NewClient uses unless WithHTTPClient gives one. Go's default
// transport keeps only 2 idle connections per host, so a worker making calls concurrently (leases,
// heartbeats, acknowledgements, several workers on one Client) would open and close a TCP
// connection for most of them; this one keeps up to 64 per host.
var pooledHTTP = &http.Client{Transport: pooledTransport()}

func pooledTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	return t
}

// NewClient returns a client of the server at baseURL (e.g. "http://localhost:8000") that
// authenticates with the tenant API key token.
func NewClient(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		baseURL:   strings.TrimRight(baseURL, "/"),
		token:     token,
		http:      pooledHTTP,
		timeout:   DefaultTimeout,
		userAgent: "unofficial-queueflow-client-go/" + Version,
	}
	for _, opt := range opts {
		opt(c)
	}
	if c.workerToken == "" {
		c.workerToken = c.token
	}
	return c
}

// BaseURL returns the server's base URL.
func (c *Client) BaseURL() string { return c.baseURL }

// Timeout returns the per-request bound.
func (c *Client) Timeout() time.Duration { return c.timeout }

type callOpts struct {
	worker  bool          // authenticate with the worker token
	extra   time.Duration // added to the timeout (lease long-polls)
	headers map[string]string
	noAuth  bool
}

// do sends one request and decodes a 2xx JSON answer into out (when out is not nil). Any status
// of 400 or more is an *APIError.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any, o callOpts) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout+o.extra)
		defer cancel()
	}
	resp, err := c.send(ctx, method, path, query, body, o, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("queueflow: %s %s: reading the response: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		return decodeAPIError(resp.StatusCode, raw, method, path)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent || len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("queueflow: %s %s: decoding the response: %w", method, path, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, query url.Values, body any, o callOpts,
	accept string) (*http.Response, error) {
	target := c.baseURL + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var reader io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("queueflow: %s %s: encoding the body: %w", method, path, err)
		}
		reader = bytes.NewReader(encoded)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, reader)
	if err != nil {
		return nil, fmt.Errorf("queueflow: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", c.userAgent)
	token := c.token
	if o.worker {
		token = c.workerToken
	}
	if token != "" && !o.noAuth {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range o.headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("queueflow: %s %s: %w", method, path, err)
	}
	return resp, nil
}

// seg escapes one path segment.
func seg(s string) string { return url.PathEscape(s) }

func (p ListParams) values() url.Values {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", fmt.Sprint(p.Limit))
	}
	if p.Offset > 0 {
		q.Set("offset", fmt.Sprint(p.Offset))
	}
	if p.OrderBy != "" {
		q.Set("order_by", p.OrderBy)
	}
	if p.IncludeTotal {
		q.Set("include_total", "true")
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	if p.CreatedAfter != nil {
		q.Set("created_after", p.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if p.CreatedBefore != nil {
		q.Set("created_before", p.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	return q
}

func setIf(q url.Values, key, value string) {
	if value != "" {
		q.Set(key, value)
	}
}

// Do sends a request to any route with the tenant token and decodes a JSON answer into out
// (when not nil): an escape hatch for routes or fields this SDK does not type.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	return c.do(ctx, method, path, query, body, out, callOpts{})
}
