package objstore

import (
	"context"
	"sync/atomic"
)

// Kind is a kind of Store request, one per Store method.
type Kind int

// The kinds of request counted by Counting.
const (
	KindGet      Kind = iota // Get
	KindGetRange             // GetRange
	KindPut                  // Put
	KindList                 // List
	KindDelete               // Delete
	KindHead                 // Size
	numKinds
)

var kindNames = [numKinds]string{"get", "get_range", "put", "list", "delete", "head"}

// Kinds lists every Kind, in order.
func Kinds() []Kind { return []Kind{KindGet, KindGetRange, KindPut, KindList, KindDelete, KindHead} }

// String returns the kind's metric-friendly name: "get", "get_range",
// "put", "list", "delete" or "head".
func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return "unknown"
	}
	return kindNames[k]
}

// OpStats counts the calls of one kind.
type OpStats struct {
	// Requests is the number of calls, whether they succeeded or not.
	Requests int64
	// Errors is the number of calls that returned an error.
	Errors int64
	// Bytes is the number of object bytes moved by successful calls: data
	// returned by Get and GetRange, data stored by Put, 0 for the others.
	Bytes int64
}

// Stats is a snapshot of a CountingStore's counters.
type Stats struct {
	Get, GetRange, Put, List, Delete, Head OpStats
}

// Of returns the counters of kind k.
func (s Stats) Of(k Kind) OpStats {
	switch k {
	case KindGet:
		return s.Get
	case KindGetRange:
		return s.GetRange
	case KindPut:
		return s.Put
	case KindList:
		return s.List
	case KindDelete:
		return s.Delete
	case KindHead:
		return s.Head
	}
	return OpStats{}
}

func (s *Stats) ptr(k Kind) *OpStats {
	switch k {
	case KindGet:
		return &s.Get
	case KindGetRange:
		return &s.GetRange
	case KindPut:
		return &s.Put
	case KindList:
		return &s.List
	case KindDelete:
		return &s.Delete
	case KindHead:
		return &s.Head
	}
	return nil
}

// Sub returns s minus prev, the counts between two snapshots.
func (s Stats) Sub(prev Stats) Stats {
	var d Stats
	for _, k := range Kinds() {
		a, b := s.Of(k), prev.Of(k)
		*d.ptr(k) = OpStats{
			Requests: a.Requests - b.Requests,
			Errors:   a.Errors - b.Errors,
			Bytes:    a.Bytes - b.Bytes,
		}
	}
	return d
}

// Total returns the sums over all kinds.
func (s Stats) Total() OpStats {
	var t OpStats
	for _, k := range Kinds() {
		o := s.Of(k)
		t.Requests += o.Requests
		t.Errors += o.Errors
		t.Bytes += o.Bytes
	}
	return t
}

type opCounters struct {
	requests, errors, bytes atomic.Int64
}

// CountingStore is a Store that counts the calls made through it, by Kind,
// and passes them on to another Store. Make one with Counting.
type CountingStore struct {
	inner Store
	ops   [numKinds]opCounters
}

var _ Store = (*CountingStore)(nil)

// Counting returns a Store that forwards every call to s and counts it,
// with atomic counters read by Snapshot. Each Store call counts as one
// request of its Kind (Size is "head"), whatever s does to serve it.
func Counting(s Store) *CountingStore { return &CountingStore{inner: s} }

// Unwrap returns the wrapped Store.
func (c *CountingStore) Unwrap() Store { return c.inner }

// Snapshot returns the counters' current values. Each counter is read
// atomically; counts of calls still in flight may be partly included.
func (c *CountingStore) Snapshot() Stats {
	var s Stats
	for _, k := range Kinds() {
		o := &c.ops[k]
		*s.ptr(k) = OpStats{
			Requests: o.requests.Load(),
			Errors:   o.errors.Load(),
			Bytes:    o.bytes.Load(),
		}
	}
	return s
}

func (c *CountingStore) done(k Kind, bytes int, err error) {
	o := &c.ops[k]
	o.requests.Add(1)
	if err != nil {
		o.errors.Add(1)
		return
	}
	o.bytes.Add(int64(bytes))
}

// Put implements Store.
func (c *CountingStore) Put(ctx context.Context, key string, data []byte) error {
	err := c.inner.Put(ctx, key, data)
	c.done(KindPut, len(data), err)
	return err
}

// Get implements Store.
func (c *CountingStore) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := c.inner.Get(ctx, key)
	c.done(KindGet, len(b), err)
	return b, err
}

// GetRange implements Store.
func (c *CountingStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	b, err := c.inner.GetRange(ctx, key, off, n)
	c.done(KindGetRange, len(b), err)
	return b, err
}

// Size implements Store.
func (c *CountingStore) Size(ctx context.Context, key string) (int64, error) {
	n, err := c.inner.Size(ctx, key)
	c.done(KindHead, 0, err)
	return n, err
}

// List implements Store.
func (c *CountingStore) List(ctx context.Context, prefix string, fn func(key string, size int64) error) error {
	err := c.inner.List(ctx, prefix, fn)
	c.done(KindList, 0, err)
	return err
}

// Delete implements Store.
func (c *CountingStore) Delete(ctx context.Context, key string) error {
	err := c.inner.Delete(ctx, key)
	c.done(KindDelete, 0, err)
	return err
}
