package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/eddy-backlinks/eddy/internal/toxiproxytest"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/objstore/miniotest"
	"github.com/eddy-backlinks/eddy/objstore/s3"
)

// eddyPeer is the engine as a node runs it: a local directory (eddy) or
// a MinIO bucket (eddy-s3) as its store, the default caches, compaction
// after each flush.
type eddyPeer struct {
	db    *lsm.DB
	dir   string
	minio *miniotest.Server // eddy-s3
	store objstore.Store
}

func openEddyPeer(ctx context.Context, dir string, bucket bool) (*eddyPeer, error) {
	p := &eddyPeer{dir: dir}
	var err error
	if bucket {
		if p.minio, err = miniotest.Start(ctx, filepath.Join(dir, "minio")); err != nil {
			return nil, fmt.Errorf("eddy-s3 runs a local MinIO server: %w", err)
		}
		p.store, err = s3Store(p.minio.Endpoint())
	} else {
		p.store, err = local.New(filepath.Join(dir, "store"))
	}
	if err != nil {
		p.close()
		return nil, err
	}
	if p.db, err = lsm.Open(ctx, lsm.Options{Store: p.store, Dir: filepath.Join(dir, "db"), NoGCGrace: true}); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// s3Store is an S3 client of the test MinIO server at endpoint
// (host:port, or a proxy in front of it).
func s3Store(endpoint string) (*s3.Store, error) {
	return s3.New(s3.Config{
		Endpoint: endpoint, Region: "us-east-1", Bucket: miniotest.Bucket, Prefix: "peers",
		Insecure: true, PathStyle: true, AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey,
	})
}

func (p *eddyPeer) config() string {
	if p.minio != nil {
		return "lsm engine defaults (64 MiB memtables, fan-in 8 for flushes and 16 for merged runs, 256 MiB frame cache, mapped table metadata), every tree compacted whole at the end as Pebble is, a local MinIO server as its bucket (S3 API); bytes: the bucket's objects (tables, manifests) and the local metadata directory"
	}
	return "lsm engine defaults (64 MiB memtables, fan-in 8 for flushes and 16 for merged runs, 256 MiB frame cache, mapped table metadata), every tree compacted whole at the end as Pebble is, local directory store; bytes: the store and the local metadata directory"
}

func (p *eddyPeer) add(op *workload.Op) error {
	if op.Revoke {
		return p.db.AddRevocation(&op.Revocation)
	}
	return p.db.AddBacklink(&op.Link)
}

func (p *eddyPeer) apply(op *workload.Op) error {
	err := p.add(op)
	if errors.Is(err, lsm.ErrFull) {
		if err := p.flushCompact(context.Background()); err != nil {
			return err
		}
		err = p.add(op)
	}
	return err
}

// flushCompact flushes the memtables and runs the compactions the policy
// asks for, as a node does after each flush.
func (p *eddyPeer) flushCompact(ctx context.Context) error {
	if err := p.db.Flush(ctx); err != nil {
		return err
	}
	for {
		did, err := p.db.Compact(ctx)
		if err != nil || !did {
			return err
		}
	}
}

// finish flushes and then merges every run of each tree into one, as the
// Pebble peers are compacted whole at the end.
func (p *eddyPeer) finish(ctx context.Context) error {
	if err := p.flushCompact(ctx); err != nil {
		return err
	}
	_, err := p.db.CompactFull(ctx)
	return err
}

func (p *eddyPeer) size(ctx context.Context) (int64, string, error) {
	var s int64
	if err := p.store.List(ctx, "", func(_ string, n int64) error { s += n; return nil }); err != nil {
		return 0, "", err
	}
	m, _, err := dirBytes(filepath.Join(p.dir, "db"))
	return s + m, "the store's objects (tables, manifests) and the node's local metadata directory", err
}

func (p *eddyPeer) page(ctx context.Context, target link.RecordID, after []byte, limit int) (int, []byte, error) {
	q := lsm.Query{Target: target, Limit: limit}
	if after != nil {
		if len(after) != 32 {
			return 0, nil, fmt.Errorf("cursor of %d bytes", len(after))
		}
		q.After = &lsm.Cursor{Source: link.GetRecordID(after), Location: link.Location(binary.BigEndian.Uint64(after[24:]))}
	}
	res, err := p.db.Backlinks(ctx, q)
	if err != nil {
		return 0, nil, err
	}
	if res.Next == nil {
		return len(res.Links), nil, nil
	}
	next := make([]byte, 32)
	res.Next.Source.Put(next)
	binary.BigEndian.PutUint64(next[24:], uint64(res.Next.Location))
	return len(res.Links), next, nil
}

func (p *eddyPeer) count(ctx context.Context, target link.RecordID) (int, error) {
	n, _, err := p.db.Count(ctx, target, lsm.Filter{})
	return int(n), err
}

func (p *eddyPeer) serverCPU() time.Duration { return 0 }
func (p *eddyPeer) serverRSS() int64         { return 0 }
func (p *eddyPeer) close() error {
	var err error
	if p.db != nil {
		err = p.db.Close()
	}
	if c, ok := p.store.(interface{ Close() error }); ok {
		c.Close()
	}
	if p.minio != nil {
		p.minio.Stop()
	}
	return err
}

// coldAt runs the cold queries of ts through the bucket at addr, rtt
// away.
func (p *eddyPeer) coldAt(ctx context.Context, addr string, rtt time.Duration, ts []qtarget) (*PeerCold, error) {
	far, err := s3Store(addr)
	if err != nil {
		return nil, err
	}
	defer far.Close()
	counting := objstore.Counting(far)
	// One untimed request opens the client's connection, as a node's is
	// open long before a query.
	if _, err := far.Size(ctx, "does-not-exist"); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return nil, err
	}
	c := &PeerCold{RTTms: float64(rtt.Milliseconds()), Queries: len(ts), Bound2RTTus: float64(2*rtt+10*time.Millisecond) / 1e3}
	lat := make([]time.Duration, 0, len(ts))
	var gets int64
	for _, t := range ts {
		r := lsm.NewReader(counting, lsm.NewFrameCache(0))
		s0 := counting.Snapshot()
		t0 := time.Now()
		qr, err := r.Backlinks(ctx, p.db.View(), lsm.Query{Target: t.id, Limit: queryLimit})
		d := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if len(qr.Links) != min(queryLimit, t.live) {
			return nil, fmt.Errorf("cold query of %v: %d links, want %d", t.id, len(qr.Links), min(queryLimit, t.live))
		}
		lat = append(lat, d)
		st := counting.Snapshot().Sub(s0)
		g := st.Get.Requests + st.GetRange.Requests
		gets += g
		c.GETsMax = max(c.GETsMax, g)
		c.RoundTripsMax = max(c.RoundTripsMax, roundTrips(&qr.Stats))
		c.LinksMean += float64(t.live) / float64(len(ts))
	}
	slices.Sort(lat)
	c.P50us, c.P99us = percentile(lat, 0.5), percentile(lat, 0.99)
	c.GETsMean = float64(gets) / float64(len(ts))
	return c, nil
}

// farRTTs are the round-trip delays cold queries are measured at
// (eddy-s3): none (MinIO on loopback), and a bucket 20 ms and 50 ms away.
var farRTTs = []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond}

// PeerCold is Eddy's cold queries with the bucket rtt away: each target
// once, with an empty frame cache and the table metadata local, as on a
// node.
type PeerCold struct {
	RTTms         float64 `json:"rtt_ms"`
	Queries       int     `json:"queries"`
	LinksMean     float64 `json:"links_mean"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	GETsMean      float64 `json:"gets_mean"`
	GETsMax       int64   `json:"gets_max"`
	RoundTripsMax int     `json:"round_trips_max"`
	Bound2RTTus   float64 `json:"bound_us"` // the bound: 2 RTT + 10 ms
}

// cold measures cold queries of ts through a toxiproxy in front of the
// MinIO server, at each of farRTTs: a bucket far away, every response
// delayed by the RTT asked, so that each request to the bucket costs at
// least one round trip of it. Connections are kept alive by the S3
// client, as to a real bucket; the proxy's own hop is loopback.
func (p *eddyPeer) cold(ctx context.Context, ts []qtarget) ([]PeerCold, error) {
	if p.minio == nil {
		return nil, nil
	}
	tp, err := toxiproxytest.Start(ctx)
	if err != nil {
		return nil, err
	}
	defer tp.Stop()
	var out []PeerCold
	for i, rtt := range farRTTs {
		addr, err := tp.Far(fmt.Sprintf("minio%d", i), p.minio.Endpoint(), rtt)
		if err != nil {
			return nil, err
		}
		c, err := p.coldAt(ctx, addr, rtt, ts)
		if err != nil {
			return nil, err
		}
		out = append(out, *c)
	}
	return out, nil
}
