package simnet

import (
	"encoding/binary"
	"errors"
)

// carHeader returns a CAR v1 header {roots: [root], version: 1}.
func carHeader(root dagCID) []byte {
	h := make(cbor, 0, 64)
	h = h.mapHeader(2).text("roots").array(1).link(root).text("version").uint(1)
	out := binary.AppendUvarint(make([]byte, 0, len(h)+80), uint64(len(h)))
	return append(out, h...)
}

// appendBlock appends one CAR block section: varint length, binary CID,
// data.
func appendBlock(b []byte, c dagCID, data []byte) []byte {
	b = binary.AppendUvarint(b, uint64(36+len(data)))
	b = append(b, cidPrefix[:]...)
	b = append(b, c[:]...)
	return append(b, data...)
}

// Errors of RepoCAR, named like com.atproto.sync.getRepo's errors.
var (
	ErrRepoNotFound    = errors.New("RepoNotFound")
	ErrRepoTakendown   = errors.New("RepoTakendown")
	ErrRepoDeactivated = errors.New("RepoDeactivated")
)

// RepoCAR returns did's repository as com.atproto.sync.getRepo serves it:
// a CAR v1 whose root is the latest signed commit (repository format
// version 3), followed by every MST node (pre-order) and every record
// block. A deleted or unknown account is ErrRepoNotFound, a taken-down
// one ErrRepoTakendown, a deactivated one ErrRepoDeactivated.
func (w *World) RepoCAR(did string) ([]byte, error) {
	// Every commit leaves the MST's cached node CIDs current, so walking it
	// only reads.
	w.mu.RLock()
	defer w.mu.RUnlock()
	a, ok := w.byDID[did]
	if !ok {
		return nil, ErrRepoNotFound
	}
	switch a.status {
	case StatusDeleted:
		return nil, ErrRepoNotFound
	case StatusTakendown:
		return nil, ErrRepoTakendown
	case StatusDeactivated:
		return nil, ErrRepoDeactivated
	}
	size := 300
	for _, r := range a.list {
		size += len(r.ver.cbor) + 120
	}
	out := carHeader(a.head)
	out = append(make([]byte, 0, size+len(out)), out...)
	out = appendBlock(out, a.head, signedOrDerived(a.commit, a.did, a.data, a.rev))
	var recs []*version
	seen := make(map[dagCID]bool, len(a.list))
	a.tree.walk(func(c dagCID, block []byte) {
		out = appendBlock(out, c, block)
	}, func(key string, val dagCID) {
		if seen[val] {
			return
		}
		seen[val] = true
		recs = append(recs, a.records[key].ver)
	})
	for _, v := range recs {
		out = appendBlock(out, v.cid, v.cbor)
	}
	return out, nil
}
