package lsm

import (
	"bytes"
	"testing"
)

// The cache's counters move with what it does: a miss, a hit, an eviction
// past the byte bound, and a dropped table (not an eviction).
func TestFrameCacheCounters(t *testing.T) {
	c := NewFrameCache(300)
	if _, ok := c.Get("t1", 0); ok {
		t.Fatal("hit in an empty cache")
	}
	frame := bytes.Repeat([]byte{7}, 100)
	c.Put("t1", 0, frame)
	if got, ok := c.Get("t1", 0); !ok || !bytes.Equal(got, frame) {
		t.Fatal("miss after Put")
	}
	c.Put("t1", 1, frame)
	c.Put("t2", 0, frame)
	if s := c.Stats(); s.Hits != 1 || s.Misses != 1 || s.Evictions != 0 || s.Bytes != 300 || s.Frames != 3 || s.MaxBytes != 300 {
		t.Fatalf("stats %+v", s)
	}
	if _, ok := c.Get("t1", 0); !ok { // t1/0 is now the most recently used
		t.Fatal("miss")
	}
	c.Put("t2", 1, frame) // past the bound: the least recently used (t1/1) goes
	if _, ok := c.Get("t1", 1); ok {
		t.Fatal("t1/1 was not evicted")
	}
	c.DropTable("t2")
	s := c.Stats()
	if s.Hits != 2 || s.Misses != 2 || s.Evictions != 1 || s.Bytes != 100 || s.Frames != 1 {
		t.Fatalf("stats %+v", s)
	}
	if _, ok := c.Get("t1", 0); !ok {
		t.Fatal("t1/0, used recently, was evicted")
	}
	s = c.Stats()
	if s.Hits != 3 {
		t.Fatalf("stats %+v", s)
	}
	if r := s.HitRate(); r != 0.6 {
		t.Fatalf("hit rate %v", r)
	}
	c.Put("big", 0, make([]byte, 301)) // larger than the bound: not cached, nothing evicted
	if s := c.Stats(); s.Evictions != 1 || s.Frames != 1 {
		t.Fatalf("stats after an oversized frame %+v", s)
	}
}
