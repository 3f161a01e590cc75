package queueflow

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Concurrent calls reuse their connections: a second round of 16 concurrent calls opens no new
// one (Go's default transport keeps 2 idle connections per host and would open 14 more).
func TestConcurrentCallsReuseConnections(t *testing.T) {
	var opened atomic.Int64
	release := make(chan struct{})
	var arrived sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-release // hold every call until all 16 are in flight, so each needs its own connection
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"healthy"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := NewClient(srv.URL, "t")

	round := func() {
		arrived.Add(16)
		var done sync.WaitGroup
		for i := 0; i < 16; i++ {
			done.Add(1)
			go func() {
				defer done.Done()
				if _, err := c.Health(context.Background()); err != nil {
					t.Error(err)
				}
			}()
		}
		arrived.Wait()
		release <- struct{}{} // let them go one by one: each returns its connection to the pool
		for i := 1; i < 16; i++ {
			release <- struct{}{}
		}
		done.Wait()
	}
	round()
	first := opened.Load()
	round()
	if again := opened.Load() - first; again != 0 {
		t.Fatalf("the second round opened %d new connections (first round: %d)", again, first)
	}
}
