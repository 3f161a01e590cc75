package queueflow

import (
	"context"
	"testing"
	"time"
)

func TestBackoffGrowsAndCaps(t *testing.T) {
	b := NewBackoff(100*time.Millisecond, 5*time.Second)
	b.rand = func() float64 { return 0.999999 } // the top of each range
	var got []time.Duration
	for i := 0; i < 10; i++ {
		got = append(got, b.Next().Round(time.Millisecond))
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("wait %d = %v, want %v (all %v)", i, got[i], want[i]*time.Millisecond, got)
		}
	}
	if b.Attempts() != 10 {
		t.Fatalf("attempts %d", b.Attempts())
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Fatalf("after reset %v", d)
	}
}

func TestBackoffJitterRange(t *testing.T) {
	b := NewBackoff(time.Second, 5*time.Second)
	b.rand = func() float64 { return 0 }
	if d := b.Next(); d != 500*time.Millisecond {
		t.Fatalf("bottom of the first range = %v", d)
	}
	// Real randomness stays within [d/2, d] and is never above the cap.
	r := NewBackoff(100*time.Millisecond, 5*time.Second)
	for i := 0; i < 200; i++ {
		d := r.Next()
		if d > 5*time.Second || d < 50*time.Millisecond {
			t.Fatalf("wait %v out of range", d)
		}
	}
	distinct := map[time.Duration]bool{}
	for i := 0; i < 20; i++ {
		r.Reset()
		r.Next()
		distinct[r.Next()] = true
	}
	if len(distinct) < 2 {
		t.Fatal("no jitter")
	}
}

func TestBackoffHugeAttemptCount(t *testing.T) {
	b := NewBackoff(time.Millisecond, 5*time.Second)
	for i := 0; i < 1000; i++ {
		if d := b.Next(); d <= 0 || d > 5*time.Second {
			t.Fatalf("attempt %d: %v", i, d)
		}
	}
}

func TestSleepCtx(t *testing.T) {
	if !sleepCtx(context.Background(), time.Millisecond) {
		t.Fatal("full sleep reported as interrupted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if sleepCtx(ctx, time.Minute) || time.Since(start) > time.Second {
		t.Fatal("cancelled sleep did not return at once")
	}
}
