package lsm

// sealed holds the batches of a map in the bucket (the PLC map, the names
// tree) that a flush took, until the view a map reads holds them: what
// the leader added stays visible to its lookups until then. Not safe for
// concurrent use: its map's lock guards it.
type sealed[B any] struct {
	batches []sealedBatch[B]
	// pruned is the newest generation a batch was dropped at: a lookup
	// that found nothing in an older view may have missed that batch.
	pruned uint64
}

type sealedBatch[B any] struct {
	b   *B
	gen uint64 // the generation that published b; 0 until then
}

func (s *sealed[B]) add(b *B) { s.batches = append(s.batches, sealedBatch[B]{b: b}) }

// publish records that generation gen holds b's tables. The caller (the
// leader's flush) has applied gen, so its map's views are at gen or later
// from now on: b, and any batch published before it, are dropped at once
// (a lookup still holding an older view asks again: stale). Without it a
// map whose lookups all hit memory would keep every batch it published.
func (s *sealed[B]) publish(b *B, gen uint64) {
	for i := range s.batches {
		if s.batches[i].b == b {
			s.batches[i].gen = gen
		}
	}
	s.prune(gen)
}

// prune drops the batches the view at generation gen holds.
func (s *sealed[B]) prune(gen uint64) {
	keep := s.batches[:0]
	for _, x := range s.batches {
		if x.gen == 0 || x.gen > gen {
			keep = append(keep, x)
		} else {
			s.pruned = max(s.pruned, gen)
		}
	}
	clear(s.batches[len(keep):])
	s.batches = keep
}

// stale says whether a lookup that found nothing in the view at
// generation gen may have missed a batch dropped since.
func (s *sealed[B]) stale(gen uint64) bool { return gen < s.pruned }

// len is the number of batches held.
func (s *sealed[B]) len() int { return len(s.batches) }

// find returns the first result of f over the batches that reports ok.
func find[B, V any](s *sealed[B], f func(*B) (V, bool)) (V, bool) {
	for _, x := range s.batches {
		if v, ok := f(x.b); ok {
			return v, true
		}
	}
	var zero V
	return zero, false
}
