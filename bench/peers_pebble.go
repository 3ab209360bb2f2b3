package bench

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// pebblePeer is Pebble in one of two configurations: Constellation-style
// string keys with default options, or the expert's (Eddy's 64-byte
// records as keys, zstd, 64 KiB blocks, bloom filters on the target).
type pebblePeer struct {
	db     *pebble.DB
	dir    string
	expert bool
	names  *peerNames
	batch  *pebble.Batch
	key    []byte
	upper  []byte
}

// targetPrefixLen: the expert keys' prefix, for Split and the bloom
// filters: the target.
const targetPrefixLen = link.RecordIDSize

// expertComparer orders keys bytewise like Pebble's default comparer,
// with the target as the prefix its bloom filters hold (SeekPrefixGE).
var expertComparer = func() *pebble.Comparer {
	c := *pebble.DefaultComparer
	c.Name = "eddy.target-prefix.v1"
	c.Split = func(k []byte) int { return min(len(k), targetPrefixLen) }
	c.ComparePointSuffixes = bytes.Compare
	c.CompareRangeSuffixes = bytes.Compare
	return &c
}()

// expertCacheBytes is the expert's block cache: Eddy's frame cache's size
// (lsm.DefaultCacheBytes), where Pebble's default is 8 MB.
const expertCacheBytes = 256 << 20

func openPebblePeer(dir string, expert bool, names *peerNames) (*pebblePeer, error) {
	db, err := openPebble(dir, expert)
	if err != nil {
		return nil, err
	}
	p := &pebblePeer{db: db, dir: dir, expert: expert, names: names}
	p.batch = db.NewBatch()
	return p, nil
}

// openPebble opens dir with the configuration's options (the expert's
// with its own block cache, released by the DB when it closes).
func openPebble(dir string, expert bool) (*pebble.DB, error) {
	o := pebblePeerOptions(expert)
	if expert {
		c := pebble.NewCache(expertCacheBytes)
		defer c.Unref()
		o.Cache = c
	}
	return pebble.Open(dir, o)
}

func pebblePeerOptions(expert bool) *pebble.Options {
	o := &pebble.Options{Logger: pebbleLogger{stderrLogf}}
	if expert {
		o.Comparer = expertComparer
		o.ApplyCompressionSettings(func() pebble.DBCompressionSettings {
			return pebble.UniformDBCompressionSettings(sstable.ZstdCompression)
		})
		for i := range o.Levels {
			o.Levels[i].BlockSize = 64 << 10
			o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		}
	}
	return o
}

func (p *pebblePeer) config() string {
	v := pebbleVersion()
	if p.expert {
		return "pebble " + v + ": keys are Eddy's 64-byte records (target, source, location, rev), empty values; zstd (level 3) on every level, 64 KiB blocks, bloom filters (10 bits/key) on the 24-byte target prefix, queries by SeekPrefixGE, a 256 MiB block cache (Eddy's frame cache's size); batches of 1,000 ops, not synced; flushed and compacted whole at the end"
	}
	return "pebble " + v + ": Constellation-style keys target|collection|path|did|rkey as strings (0x00 between), empty values, default options; batches of 1,000 ops, not synced; flushed and compacted whole at the end"
}

func (p *pebblePeer) keyOf(dst []byte, l *link.Backlink) ([]byte, error) {
	if p.expert {
		dst = slices.Grow(dst[:0], link.BacklinkSize)[:link.BacklinkSize]
		l.Put(dst)
		return dst, nil
	}
	tl, err := p.names.link(l)
	if err != nil {
		return dst, err
	}
	dst = append(append(dst[:0], tl.target...), workload.KeySep)
	dst = append(append(dst, tl.collection...), workload.KeySep)
	dst = append(append(dst, tl.path...), workload.KeySep)
	dst = append(append(dst, tl.did...), workload.KeySep)
	return append(dst, tl.rkey...), nil
}

func (p *pebblePeer) apply(op *workload.Op) error {
	var err error
	if op.Revoke {
		for i := range op.Revoked {
			if p.key, err = p.keyOf(p.key, &op.Revoked[i]); err != nil {
				return err
			}
			if err := p.batch.Delete(p.key, nil); err != nil {
				return err
			}
		}
	} else {
		if p.key, err = p.keyOf(p.key, &op.Link); err != nil {
			return err
		}
		if err := p.batch.Set(p.key, nil, nil); err != nil {
			return err
		}
	}
	if p.batch.Count() >= 1000 {
		return p.commit()
	}
	return nil
}

func (p *pebblePeer) commit() error {
	if err := p.batch.Commit(pebble.NoSync); err != nil {
		return err
	}
	p.batch.Close()
	p.batch = p.db.NewBatch()
	return nil
}

func (p *pebblePeer) finish(ctx context.Context) error {
	if err := p.commit(); err != nil {
		return err
	}
	if err := p.db.Flush(); err != nil {
		return err
	}
	if err := p.db.Compact(ctx, []byte{0}, bytes.Repeat([]byte{0xff}, 80), true); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m := p.db.Metrics()
		if m.Table.ObsoleteCount == 0 && m.Table.ZombieCount == 0 && m.Compact.InProgressBytes == 0 {
			break
		}
	}
	return nil
}

// size is the directory after a close and reopen (Pebble drops the
// write-ahead logs it kept for recycling on close).
func (p *pebblePeer) size(context.Context) (int64, string, error) {
	if err := p.db.Close(); err != nil {
		return 0, "", err
	}
	n, _, err := dirBytes(p.dir)
	if err != nil {
		return 0, "", err
	}
	if p.db, err = openPebble(p.dir, p.expert); err != nil {
		return 0, "", err
	}
	p.batch = p.db.NewBatch()
	return n, "the database directory after a close (sstables, manifest, options, WAL)", nil
}

// prefix is the keys' prefix of a target and the bound above them.
func (p *pebblePeer) prefix(t link.RecordID) (lo, hi []byte, err error) {
	if p.expert {
		b := t.Bytes()
		lo = b[:]
	} else {
		s, err := p.names.target(t)
		if err != nil {
			return nil, nil, err
		}
		lo = append([]byte(s), workload.KeySep)
	}
	hi = slices.Clone(lo)
	for i := len(hi) - 1; i >= 0; i-- { // the prefix's successor
		if hi[i] != 0xff {
			hi[i]++
			hi = hi[:i+1]
			break
		}
	}
	return lo, hi, nil
}

// page reads up to limit keys after the cursor (the last key returned),
// copying each as a query would, and returns the last one as the next
// cursor.
func (p *pebblePeer) page(ctx context.Context, target link.RecordID, after []byte, limit int) (int, []byte, error) {
	lo, hi, err := p.prefix(target)
	if err != nil {
		return 0, nil, err
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, nil, err
	}
	var ok bool
	switch {
	case after != nil:
		ok = it.SeekGE(after)
		if ok && bytes.Equal(it.Key(), after) {
			ok = it.Next()
		}
	case p.expert:
		ok = it.SeekPrefixGE(lo) // the bloom filters skip tables without the target
	default:
		ok = it.First()
	}
	keys := make([][]byte, 0, limit)
	for ; ok && len(keys) < limit; ok = it.Next() {
		keys = append(keys, slices.Clone(it.Key()))
	}
	more := ok
	if err := it.Close(); err != nil {
		return 0, nil, err
	}
	if !more || len(keys) == 0 {
		return len(keys), nil, nil
	}
	return len(keys), keys[len(keys)-1], nil
}

func (p *pebblePeer) count(ctx context.Context, target link.RecordID) (int, error) {
	lo, hi, err := p.prefix(target)
	if err != nil {
		return 0, err
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		return 0, err
	}
	return n, nil
}

func (p *pebblePeer) serverCPU() time.Duration { return 0 }
func (p *pebblePeer) serverRSS() int64         { return 0 }
func (p *pebblePeer) close() error {
	p.batch.Close()
	return p.db.Close()
}
