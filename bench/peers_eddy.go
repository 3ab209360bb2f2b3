package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

// eddyPeer is the engine as a node runs it: a local directory as its
// store, the default caches, compaction after each flush.
type eddyPeer struct {
	db  *lsm.DB
	dir string
}

func openEddyPeer(ctx context.Context, dir string) (*eddyPeer, error) {
	store, err := local.New(filepath.Join(dir, "store"))
	if err != nil {
		return nil, err
	}
	db, err := lsm.Open(ctx, lsm.Options{Store: store, Dir: filepath.Join(dir, "db"), NoGCGrace: true})
	if err != nil {
		return nil, err
	}
	return &eddyPeer{db: db, dir: dir}, nil
}

func (p *eddyPeer) config() string {
	return "lsm engine defaults (64 MiB memtables, fan-in 8, 256 MiB frame cache, mapped table metadata), local directory store; bytes: the store and the local metadata directory"
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
		if err := p.finish(context.Background()); err != nil {
			return err
		}
		err = p.add(op)
	}
	return err
}

func (p *eddyPeer) finish(ctx context.Context) error {
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

func (p *eddyPeer) size(context.Context) (int64, string, error) {
	s, _, err := dirBytes(filepath.Join(p.dir, "store"))
	if err != nil {
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
func (p *eddyPeer) close() error             { return p.db.Close() }
