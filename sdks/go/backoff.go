package queueflow

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff computes exponentially growing waits with jitter: the n-th wait is drawn uniformly
// from [d/2, d] where d = min(Max, Base * 2^n). Reset after a success. Not safe for concurrent use.
type Backoff struct {
	Base    time.Duration
	Max     time.Duration
	attempt int
	rand    func() float64 // in [0, 1); nil means math/rand
}

// NewBackoff returns a Backoff from base up to max.
func NewBackoff(base, max time.Duration) *Backoff { return &Backoff{Base: base, Max: max} }

// Next returns the wait before the next attempt and counts the attempt.
func (b *Backoff) Next() time.Duration {
	d := b.Base
	if d <= 0 {
		d = 100 * time.Millisecond
	}
	for i := 0; i < b.attempt && d < b.Max; i++ {
		d *= 2
	}
	if b.Max > 0 && d > b.Max {
		d = b.Max
	}
	if b.attempt < 62 {
		b.attempt++
	}
	r := b.rand
	if r == nil {
		r = rand.Float64
	}
	half := d / 2
	return half + time.Duration(r()*float64(d-half))
}

// Attempts is the number of waits handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }

// Reset starts over from Base.
func (b *Backoff) Reset() { b.attempt = 0 }

// sleepCtx waits d or until ctx is done; it reports whether the full wait elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
