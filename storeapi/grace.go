package storeapi

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// graceCache holds work that requests running at the same time share (a
// select's series, a selector's evaluation): the first request to ask for a
// key does the work, the others wait for it and use its result. An entry
// is kept while a request holds it and for a grace period after the last
// one lets go (the second half of a query a Thanos Querier splits in two
// may arrive a little later), then dropped and its value freed: it is never
// used again after that, so it never serves data older than the grace
// period. Failed work is not kept.
type graceCache[K comparable, V any] struct {
	grace time.Duration
	max   int                // entries at most; work past that is not shared
	hits  prometheus.Counter // entries found (nil: not counted)
	free  func(V)            // releases a dropped entry's value (called under mu)

	mu      sync.Mutex
	entries map[K]*graceEntry[K, V]
	closed  bool
}

// graceEntry is one key's shared work.
type graceEntry[K comparable, V any] struct {
	key  K
	done chan struct{} // closed when the work is done

	// Set before done is closed, read-only after.
	val V
	err error

	// Under graceCache.mu.
	refs   int         // requests holding it
	idle   *time.Timer // drops it after the grace period, while refs is 0
	cached bool        // in entries, to be found by later requests
	freed  bool
}

// errGiveUp: the request that did an entry's work gave up (its context
// ended); a request still waiting for the entry should do the work itself.
var errGiveUp = errors.New("the request sharing its work gave up")

func newGraceCache[K comparable, V any](grace time.Duration, maxEntries int, hits prometheus.Counter, free func(V)) *graceCache[K, V] {
	return &graceCache[K, V]{grace: grace, max: maxEntries, hits: hits, free: free, entries: map[K]*graceEntry[K, V]{}}
}

// acquire returns the entry for key, holding it, and whether the caller
// must do its work (it is new) and then call finish; nil when no more
// entries may be held. Every entry acquired MUST be released.
func (c *graceCache[K, V]) acquire(key K) (*graceEntry[K, V], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		e.refs++
		if e.idle != nil {
			e.idle.Stop() // if it already fired, drop finds refs > 0 and keeps e
			e.idle = nil
		}
		if c.hits != nil {
			c.hits.Inc()
		}
		return e, false
	}
	if c.closed || len(c.entries) >= c.max {
		return nil, false
	}
	e := &graceEntry[K, V]{key: key, done: make(chan struct{}), refs: 1, cached: true}
	c.entries[key] = e
	return e, true
}

// finish returns the function that records e's work: its value (freed when
// e is dropped, even with an error) and error. A failed entry is not shared
// with later requests.
func (c *graceCache[K, V]) finish(e *graceEntry[K, V]) func(V, error) {
	return func(v V, err error) {
		c.mu.Lock()
		e.val, e.err = v, err
		if err != nil && e.cached {
			delete(c.entries, e.key)
			e.cached = false
		}
		c.mu.Unlock()
		close(e.done)
	}
}

// wait waits for e's work and returns its value. A request that did not do
// the work gets errGiveUp when the one that did gave up on its context and
// its own has not ended.
func (c *graceCache[K, V]) wait(ctx context.Context, e *graceEntry[K, V], first bool) (V, error) {
	var zero V
	select {
	case <-e.done:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	if e.err != nil {
		if !first && ctx.Err() == nil && (errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded)) {
			return zero, errGiveUp
		}
		return zero, e.err
	}
	return e.val, nil
}

// release lets go of e; the last request starts its grace period.
func (c *graceCache[K, V]) release(e *graceEntry[K, V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs > 0 {
		return
	}
	if !e.cached || c.closed {
		c.drop(e)
		return
	}
	e.idle = time.AfterFunc(c.grace, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if e.refs == 0 {
			c.drop(e)
		}
	})
}

// drop removes e and frees its value; under c.mu, with e.refs 0 and its
// work done (a holder releases only after finish).
func (c *graceCache[K, V]) drop(e *graceEntry[K, V]) {
	if e.cached && c.entries[e.key] == e {
		delete(c.entries, e.key)
	}
	e.cached = false
	if !e.freed {
		e.freed = true
		c.free(e.val)
		var zero V
		e.val = zero
	}
}

// close drops every entry no request holds and stops sharing: those still
// held are dropped when released.
func (c *graceCache[K, V]) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, e := range c.entries {
		if e.refs == 0 {
			if e.idle != nil {
				e.idle.Stop()
			}
			c.drop(e)
		}
	}
}

// len is the number of entries held or in their grace period.
func (c *graceCache[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
