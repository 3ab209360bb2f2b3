package bench

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/eddy-backlinks/eddy/lsm/workload"
)

// pebble loads the same operations into Pebble (default options): a key
// per link, target|collection|path|did|rkey as rendered strings separated
// by 0x00, empty value; a revocation deletes its record's keys. Then it
// flushes, compacts everything, measures the directory, and runs the same
// queries as prefix scans.
func (b *bench) pebble(ctx context.Context, dir string, queries, modelTargets []int32) error {
	wl, res := b.wl, b.res
	if err := b.profileStart("pebble"); err != nil {
		return err
	}
	defer b.profileStop("pebble")
	res.PebbleVersion = pebbleVersion()
	b.logf("pebble: loading into %s", dir)
	db, err := pebble.Open(dir, pebbleOptions(b))
	if err != nil {
		return err
	}
	defer func() {
		if db != nil {
			db.Close()
		}
	}()
	if err := b.pebbleLoad(db); err != nil {
		return err
	}
	if err := b.pebbleCompact(ctx, db); err != nil {
		return err
	}
	if err := db.Close(); err != nil {
		db = nil
		return err
	}
	db = nil
	size, byKind, err := dirBytes(dir)
	if err != nil {
		return err
	}
	res.PebbleDirBytesAfterLoad, res.PebbleDirByKindAfterLoad = size, byKind
	b.logf("pebble: loaded in %.1fs, compacted in %.1fs: %d bytes on disk (%d in sstables)", res.PebbleLoadS, res.PebbleCompactS, size, res.PebbleSSTBytes)

	if db, err = pebble.Open(dir, pebbleOptions(b)); err != nil {
		return err
	}
	if err := b.pebbleQueries(db, queries, modelTargets); err != nil {
		return err
	}

	// The size: the directory after this second open and close, when
	// Pebble has dropped the write-ahead logs it kept for recycling.
	err = db.Close()
	db = nil
	if err != nil {
		return err
	}
	size, byKind, err = dirBytes(dir)
	if err != nil {
		return err
	}
	res.PebbleDirBytes, res.PebbleDirByKind = size, byKind
	res.PebbleBytesPerLink = float64(size) / float64(wl.LiveLinks())
	res.PebbleSSTBytesPerLink = float64(res.PebbleSSTBytes) / float64(wl.LiveLinks())
	res.EddyVsPebbleBytes = res.BytesPerLink / res.PebbleBytesPerLink
	b.logf("pebble: %d bytes on disk after reopening, %.2f bytes/link", size, res.PebbleBytesPerLink)
	return nil
}

// pebbleLoad writes the workload's links and revocations into db in stamp
// order, in batches of 1,000 operations (not synced), and flushes.
func (b *bench) pebbleLoad(db *pebble.DB) error {
	wl, res := b.wl, b.res
	t0 := time.Now()
	batch := db.NewBatch()
	var key []byte
	var keyBytes int64
	var err error
	commit := func(force bool) error {
		if batch.Count() < 1000 && !force {
			return nil
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			return err
		}
		batch.Close()
		batch = db.NewBatch()
		return nil
	}
	del := func(v *workload.Revocation) error {
		for j := v.First; j < v.First+v.Count; j++ {
			if key, err = wl.Key(key[:0], j); err != nil {
				return err
			}
			if err := batch.Delete(key, nil); err != nil {
				return err
			}
		}
		return commit(false)
	}
	ri := 0
	for i := range wl.Links {
		for ri < len(wl.Revocations) && wl.Revocations[ri].At == i {
			if err := del(&wl.Revocations[ri]); err != nil {
				return err
			}
			ri++
		}
		if key, err = wl.Key(key[:0], i); err != nil {
			return err
		}
		keyBytes += int64(len(key))
		if err := batch.Set(key, nil, nil); err != nil {
			return err
		}
		if err := commit(false); err != nil {
			return err
		}
	}
	for ; ri < len(wl.Revocations); ri++ {
		if err := del(&wl.Revocations[ri]); err != nil {
			return err
		}
	}
	if err := commit(true); err != nil {
		return err
	}
	batch.Close()
	if err := db.Flush(); err != nil {
		return err
	}
	res.PebbleLoadS = time.Since(t0).Seconds()
	res.PebbleKeyBytesMean = float64(keyBytes) / float64(len(wl.Links))
	return nil
}

// pebbleCompact compacts the whole key space and waits (up to 30 s) for
// Pebble to delete the files the compaction made obsolete.
func (b *bench) pebbleCompact(ctx context.Context, db *pebble.DB) error {
	res := b.res
	t0 := time.Now()
	if err := db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return err
	}
	res.PebbleCompactS = time.Since(t0).Seconds()
	// Let Pebble delete the files the compaction made obsolete before
	// measuring the directory.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m := db.Metrics()
		if m.Table.ObsoleteCount == 0 && m.Table.ZombieCount == 0 && m.Compact.InProgressBytes == 0 {
			break
		}
	}
	res.PebbleSSTBytes = db.Metrics().Table.Local.LiveSize
	return nil
}

// pebbleScan returns how many keys a prefix scan of target t finds (at
// most limit; limit <= 0: all), copying each key as a query would.
func (b *bench) pebbleScan(db *pebble.DB, t int32, limit int) (int, error) {
	prefix, err := b.wl.TargetPrefix(nil, t)
	if err != nil {
		return 0, err
	}
	upper := slices.Clone(prefix)
	upper[len(upper)-1]++
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
	if err != nil {
		return 0, err
	}
	keys := make([][]byte, 0, min(limit, 128))
	for ok := it.First(); ok && (limit <= 0 || len(keys) < limit); ok = it.Next() {
		keys = append(keys, slices.Clone(it.Key()))
	}
	return len(keys), it.Close()
}

// pebbleQueries checks Pebble's keys for the model targets, then times
// the warm queries as prefix scans of up to queryLimit keys.
func (b *bench) pebbleQueries(db *pebble.DB, queries, modelTargets []int32) error {
	wl, res := b.wl, b.res
	for _, t := range modelTargets {
		n, err := b.pebbleScan(db, t, 0)
		if err != nil {
			return err
		}
		if n != wl.LiveCount(t) {
			return fmt.Errorf("pebble has %d keys for target %d, the workload %d live links", n, t, wl.LiveCount(t))
		}
	}
	for _, t := range queries { // warm
		if _, err := b.pebbleScan(db, t, queryLimit); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, len(queries))
	cpu := make([]time.Duration, len(queries))
	for i, t := range queries {
		c0, t0 := cpuTime(), time.Now()
		n, err := b.pebbleScan(db, t, queryLimit)
		lat[i], cpu[i] = time.Since(t0), cpuTime()-c0
		if err != nil {
			return err
		}
		if n != min(queryLimit, wl.LiveCount(t)) {
			return fmt.Errorf("pebble: target %d: %d keys", t, n)
		}
	}
	slices.Sort(lat)
	slices.Sort(cpu)
	res.PebbleQueryP50us, res.PebbleQueryP99us = percentile(lat, 0.5), percentile(lat, 0.99)
	res.PebbleQueryCPUP50us = percentile(cpu, 0.5)
	b.logf("pebble queries: p50 %.0fµs p99 %.0fµs", res.PebbleQueryP50us, res.PebbleQueryP99us)
	return nil
}

// pebbleOptions are Pebble's defaults, with its informational log lines
// (WAL recovery) left out of the bench's output.
func pebbleOptions(b *bench) *pebble.Options {
	return &pebble.Options{Logger: pebbleLogger{b.logf}}
}

// pebbleLogger drops Pebble's informational lines and writes its errors
// through logf (the bench's log, or a peers child's stderr).
type pebbleLogger struct {
	logf func(format string, args ...any)
}

func (pebbleLogger) Infof(string, ...any) {}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.logf("pebble: "+format, args...)
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.logf("pebble: fatal: "+format, args...)
	os.Exit(1)
}

func pebbleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/cockroachdb/pebble/v2" {
				return d.Version
			}
		}
	}
	return ""
}

// dirBytes sums the sizes of the regular files under dir, in all and by
// kind of Pebble file (sst, log, MANIFEST, OPTIONS, other).
func dirBytes(dir string) (int64, map[string]int64, error) {
	var n int64
	byKind := map[string]int64{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
			name := d.Name()
			kind := "other"
			switch {
			case strings.HasSuffix(name, ".sst"):
				kind = "sst"
			case strings.HasSuffix(name, ".log"):
				kind = "log"
			case strings.HasPrefix(name, "MANIFEST"):
				kind = "manifest"
			case strings.HasPrefix(name, "OPTIONS"):
				kind = "options"
			}
			byKind[kind] += fi.Size()
		}
		return nil
	})
	return n, byKind, err
}
