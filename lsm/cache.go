package lsm

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// DefaultCacheBytes bounds the decoded-frame cache: 256 MiB holds about
// two thousand 128 KiB frames (four million backlinks), the hot set of a
// small node.
const DefaultCacheBytes = 256 << 20

type frameKey struct {
	table string
	frame int
}

type cacheEntry struct {
	key  frameKey
	recs []byte
}

// FrameCache is an LRU of decoded frames, bounded in bytes. Decoded
// frames are immutable: callers must not modify what Get returns.
type FrameCache struct {
	maxBytes  int64
	hits      atomic.Uint64
	misses    atomic.Uint64
	evictions atomic.Uint64 // frames dropped to stay within the bound

	mu struct {
		sync.Mutex
		bytes int64
		ll    *list.List
		items map[frameKey]*list.Element
	}
}

// NewFrameCache returns a cache of at most maxBytes decoded bytes
// (DefaultCacheBytes when maxBytes <= 0).
func NewFrameCache(maxBytes int64) *FrameCache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	c := &FrameCache{maxBytes: maxBytes}
	c.mu.ll = list.New()
	c.mu.items = make(map[frameKey]*list.Element)
	return c
}

// Get returns a cached frame.
func (c *FrameCache) Get(table string, frame int) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.mu.items[frameKey{table, frame}]; ok {
		c.mu.ll.MoveToFront(el)
		c.hits.Add(1)
		return el.Value.(*cacheEntry).recs, true
	}
	c.misses.Add(1)
	return nil, false
}

// Put adds a decoded frame, evicting the least recently used past the bound.
func (c *FrameCache) Put(table string, frame int, recs []byte) {
	if int64(len(recs)) > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := frameKey{table, frame}
	if el, ok := c.mu.items[k]; ok {
		c.mu.ll.MoveToFront(el)
		return
	}
	c.mu.items[k] = c.mu.ll.PushFront(&cacheEntry{key: k, recs: recs})
	c.mu.bytes += int64(len(recs))
	for c.mu.bytes > c.maxBytes {
		el := c.mu.ll.Back()
		e := el.Value.(*cacheEntry)
		c.mu.ll.Remove(el)
		delete(c.mu.items, e.key)
		c.mu.bytes -= int64(len(e.recs))
		c.evictions.Add(1)
	}
}

// DropTable forgets every frame of a table (it became garbage).
func (c *FrameCache) DropTable(table string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for el := c.mu.ll.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*cacheEntry); e.key.table == table {
			c.mu.ll.Remove(el)
			delete(c.mu.items, e.key)
			c.mu.bytes -= int64(len(e.recs))
		}
		el = next
	}
}

// CacheStats are the cache's counters. Hits and Misses count Get calls;
// Evictions counts frames dropped to stay within the byte bound (not those
// of a dropped table); Bytes and Frames are what it holds now. A metrics
// exporter reads them as monotonic counters (Hits, Misses, Evictions) and
// gauges (Bytes, Frames, MaxBytes).
type CacheStats struct {
	Hits, Misses, Evictions uint64
	Bytes, MaxBytes         int64
	Frames                  int
}

// HitRate is Hits / (Hits + Misses), 0 before any Get.
func (s CacheStats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// Stats returns the counters.
func (c *FrameCache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(), Bytes: c.mu.bytes, MaxBytes: c.maxBytes, Frames: len(c.mu.items)}
}

// cachedRange appends frames first..last of a table to dst when the cache
// holds every one of them (counting them as hits and as just used), and
// reports whether it did; it counts no miss: asking only chooses how round
// two reads a table, and a table it then asks through its filter fetches
// what it needs the usual way.
func (c *FrameCache) cachedRange(table string, first, last int, dst [][]byte) ([][]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(dst)
	for i := first; i <= last; i++ {
		el, ok := c.mu.items[frameKey{table, i}]
		if !ok {
			clear(dst[n:])
			return dst[:n], false
		}
		dst = append(dst, el.Value.(*cacheEntry).recs)
	}
	for i := first; i <= last; i++ {
		c.mu.ll.MoveToFront(c.mu.items[frameKey{table, i}])
	}
	c.hits.Add(uint64(last - first + 1))
	return dst, true
}
