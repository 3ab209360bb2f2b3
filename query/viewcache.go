package query

import (
	"sync"

	"github.com/eddy-backlinks/eddy/lsm"
)

// viewCache keeps values computed on one view, the newest it was given,
// each under a key: a view never changes, so what a page folded from it
// (getBacklinks' total, a subject's distinct accounts) holds for every
// page that follows in the same generation. Bounded: at most max units of
// size (the values' own measure), the oldest kept first to go. Safe for
// concurrent use; the values are shared, never changed once put.
type viewCache[V any] struct {
	mu    sync.Mutex
	view  *lsm.View
	m     map[string]V
	order []string // m's keys, oldest first
	used  int
	max   int
	size  func(V) int
}

func newViewCache[V any](max int, size func(V) int) viewCache[V] {
	return viewCache[V]{max: max, size: size}
}

func (c *viewCache[V]) get(v *lsm.View, k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != v {
		var zero V
		return zero, false
	}
	x, ok := c.m[k]
	return x, ok
}

// put keeps x, computed on view v, under k, forgetting what an older view
// gave; a value of an older view than the one held is dropped, as is one
// larger than the whole bound.
func (c *viewCache[V]) put(v *lsm.View, k string, x V) {
	n := c.size(x)
	if n > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != v {
		if c.view != nil && v.Generation() < c.view.Generation() {
			return
		}
		c.view, c.m, c.order, c.used = v, make(map[string]V), nil, 0
	}
	if old, ok := c.m[k]; ok {
		c.used -= c.size(old)
		c.order = deleteKey(c.order, k)
	}
	for c.used+n > c.max && len(c.order) > 0 {
		c.used -= c.size(c.m[c.order[0]])
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
	c.m[k], c.used = x, c.used+n
	c.order = append(c.order, k)
}

// len is the values held, and the view they were computed on.
func (c *viewCache[V]) len() (*lsm.View, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view, len(c.m)
}

func deleteKey(keys []string, k string) []string {
	for i, x := range keys {
		if x == k {
			return append(keys[:i], keys[i+1:]...)
		}
	}
	return keys
}
