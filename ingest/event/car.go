package event

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ipfs/go-cid"
)

// Limits on repository CAR files.
const (
	// MaxCARBytes is the largest CAR file ReadCAR accepts. The whole file is
	// held in memory while its MST is walked.
	MaxCARBytes = 1 << 30
	// MaxCARBlocks is the most blocks (commit, MST nodes, records; repeats
	// included) a CAR may hold.
	MaxCARBlocks = 8 << 20
	// MaxMSTDepth is the deepest MST accepted (root is depth 1). A real
	// repository's tree is about log4(records) deep: 12 for ten million
	// records.
	MaxMSTDepth = 64
	// MaxMSTKeyLen is the longest MST key ("collection/rkey") accepted:
	// an NSID is at most 317 bytes and a record key at most 512.
	MaxMSTKeyLen = 1024
)

// Kinds of MissingBlock.
const (
	MissingMSTNode = "mst_node"
	MissingRecord  = "record"
)

// MissingBlock is a block that a CAR's MST refers to but the CAR does not
// hold.
type MissingBlock struct {
	Kind string // MissingMSTNode or MissingRecord
	CID  string
	// Path is the record's "collection/rkey" for a missing record. For a
	// missing MST node it is empty: the keys below that node are unknown.
	Path string
}

// CARInfo describes a repository CAR decoded by ReadCAR.
type CARInfo struct {
	DID     string
	Rev     string // commit revision (TID); empty for version 2 repos, which have none
	Version int    // repository format version of the commit: 2 or 3
	Root    string // CID of the commit block (the CAR root)
	Data    string // CID of the MST root
	Blocks  int    // distinct blocks in the CAR (a repeated block counts once)
	// Records counts the MST leaves found, which is the number of ops
	// yielded: Decoded of them carry a record, the rest a Skip reason
	// (record_missing or record_cbor).
	Records int
	Decoded int
	// Missing lists the MST nodes and record blocks that the tree refers
	// to and the CAR lacks (a partial repository), in tree order.
	Missing []MissingBlock
}

var (
	errRecordTooBig = errors.New("record larger than atproto's 1 MiB limit")
	errCARTooBig    = fmt.Errorf("car: larger than %d bytes", MaxCARBytes)
)

// ReadCAR reads a repository CAR file (CAR v1 container; repository
// format version 2 or 3) and calls fn with one KindCommit/ActionCreate op
// per record, in MST key order, with DID and Rev from the commit block,
// Collection, RKey and CID from the MST, and Record decoded from the record
// block (see Op.Record). The *Op passed to fn is reused between calls: fn may
// copy *op, but must not keep the pointer. An error from fn stops the walk
// and is returned.
//
// A partial repository is not an error: an MST node that is missing is
// listed in CARInfo.Missing (its subtree is unknown), and a missing record
// block yields its op with Skip "record_missing" and is listed too. A
// record block that is not valid data yields Skip "record_cbor"; an MST
// key that is not "collection/rkey", Skip "bad_path". Errors are kept for
// a CAR that cannot be read (bad container, no commit block, undecodable
// commit or MST node, an MST node reached twice, keys out of order, a
// limit exceeded, MST entries naming one record block so often that
// decoding would exceed twice the CAR's size); ops yielded before such an
// error stand, and CARInfo describes what was read up to it.
//
// Nothing is verified cryptographically: neither the commit signature nor
// the blocks' hashes against their CIDs.
func ReadCAR(r io.Reader, fn func(*Op) error) (CARInfo, error) {
	b, err := readAllLimited(r, MaxCARBytes)
	if err != nil {
		return CARInfo{}, err
	}
	return DecodeCAR(b, fn)
}

// readAllLimited reads r to its end, failing beyond max bytes. When r can
// tell its size (bytes.Reader, bytes.Buffer, strings.Reader, a regular
// file), the buffer is allocated once.
func readAllLimited(r io.Reader, max int) ([]byte, error) {
	hint := 64 << 10
	switch v := r.(type) {
	case interface{ Len() int }:
		hint = v.Len() + 1
	case *os.File:
		if st, err := v.Stat(); err == nil && st.Mode().IsRegular() {
			hint = int(min(st.Size(), int64(max))) + 1
		}
	}
	buf := make([]byte, 0, min(hint, max+1))
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > max {
			return nil, errCARTooBig
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// DecodeCAR is ReadCAR over a CAR file already in memory. b is not
// modified and not retained after DecodeCAR returns.
func DecodeCAR(b []byte, fn func(*Op) error) (CARInfo, error) {
	return DecodeCARWith(b, CAROptions{}, fn)
}

// CAROptions adjust DecodeCARWith.
type CAROptions struct {
	// NoCID leaves Op.CID empty: rendering every record's CID as a string
	// costs about a tenth of decoding a repository, and a backfill does
	// not use it. (CARInfo.Missing still names the CIDs.)
	NoCID bool
}

// DecodeCARWith is DecodeCAR with options.
func DecodeCARWith(b []byte, opt CAROptions, fn func(*Op) error) (CARInfo, error) {
	c, err := OpenCAR(b, opt)
	if err != nil {
		return c.Info(), err
	}
	return c.Walk(true, fn)
}

// CAR is a repository CAR file opened: its blocks indexed and its commit
// read, so that its tree can be walked more than once. A backfill checks
// the whole repository (its DID, the blocks it lacks) with a walk that
// decodes no record, then decodes the records a batch at a time as it
// writes them: it holds the CAR and its index, not every record decoded
// (which takes several times the CAR's bytes). b is not modified; it is
// retained until the CAR is.
type CAR struct {
	b      []byte
	opt    CAROptions
	blocks map[string][]byte
	data   []byte  // the MST root's CID
	info   CARInfo // what the container and the commit say
}

// OpenCAR reads b's header, indexes its blocks and decodes its commit.
// The CAR returned is never nil: on an error, its Info says what was read.
func OpenCAR(b []byte, opt CAROptions) (*CAR, error) {
	c := &CAR{b: b, opt: opt}
	if len(b) > MaxCARBytes {
		return c, errCARTooBig
	}
	roots, off, err := carHeader(b)
	if err != nil {
		return c, err
	}
	if len(roots) == 0 {
		return c, errors.New("car: no root")
	}
	blocks := make(map[string][]byte, min(len(b)/256, MaxCARBlocks))
	_, err = carBlocks(b, off, MaxCARBlocks, func(cid, data []byte) {
		if _, dup := blocks[string(cid)]; !dup {
			blocks[string(cid)] = data
		}
	})
	if err != nil {
		return c, err
	}
	c.info.Blocks = len(blocks)
	c.info.Root = cidString(roots[0])
	cb, ok := blocks[string(roots[0])]
	if !ok {
		return c, fmt.Errorf("car: commit block %s missing", c.info.Root)
	}
	if c.data, err = decodeCommit(cb, &c.info); err != nil {
		return c, err
	}
	c.blocks = blocks
	return c, nil
}

// Info is what the container and the commit say (DID, Rev, Version, Root,
// Data, Blocks), before any walk.
func (c *CAR) Info() CARInfo { return c.info }

// Walk visits the repository's tree in key order and calls fn with one
// KindCommit/ActionCreate op per record, as DecodeCAR does (fn may be nil).
// Without records, no record is decoded: every op's Record is nil and no
// op says SkipRecordCBOR, but the tree, its order, its limits and the
// blocks it lacks (CARInfo.Missing) are checked as a walk that decodes
// checks them, so a walk with records that follows one without meets no
// other error.
func (c *CAR) Walk(records bool, fn func(*Op) error) (CARInfo, error) {
	info := c.info
	if c.blocks == nil {
		return info, errors.New("car: not opened")
	}
	if fn == nil {
		fn = func(*Op) error { return nil }
	}
	w := mstWalker{
		blocks:    c.blocks,
		visited:   make(map[string]struct{}, len(c.blocks)/4+1),
		fn:        fn,
		info:      &info,
		budget:    newDecodeBudget(len(c.b)),
		noCID:     c.opt.NoCID,
		noRecords: !records,
	}
	w.op = Op{Kind: KindCommit, DID: info.DID, Rev: info.Rev, Action: ActionCreate}
	err := w.walk(c.data, 1)
	return info, err
}

// decodeCommit reads a signed repository commit block: version 3
// {did, version, data, rev, prev, sig} or version 2 (no rev). It fills
// info and returns the MST root CID.
func decodeCommit(b []byte, info *CARInfo) ([]byte, error) {
	if err := scanOne(b); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	r := cborReader{b: b}
	n, err := r.mapLen()
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	var data []byte
	version := int64(-1)
	for i := 0; i < n; i++ {
		k, err := r.text()
		if err != nil {
			return nil, fmt.Errorf("commit: %w", err)
		}
		switch string(k) {
		case "did":
			s, err := r.text()
			if err != nil {
				return nil, fmt.Errorf("commit did: %w", err)
			}
			info.DID = string(s)
		case "rev":
			s, err := r.text()
			if err != nil {
				return nil, fmt.Errorf("commit rev: %w", err)
			}
			info.Rev = string(s)
		case "version":
			if version, err = r.int(); err != nil {
				return nil, fmt.Errorf("commit version: %w", err)
			}
		case "data":
			if data, err = r.link(); err != nil {
				return nil, fmt.Errorf("commit data: %w", err)
			}
		default: // prev, sig
			if err := r.skip(); err != nil {
				return nil, fmt.Errorf("commit: %w", err)
			}
		}
	}
	if version != 2 && version != 3 {
		return nil, fmt.Errorf("commit: unsupported repository version %d", version)
	}
	info.Version = int(version)
	if len(info.DID) < 5 || info.DID[:4] != "did:" {
		return nil, fmt.Errorf("commit: bad did %q", info.DID)
	}
	if data == nil {
		return nil, errors.New("commit: no data (MST root)")
	}
	info.Data = cidString(data)
	return data, nil
}

type mstWalker struct {
	blocks   map[string][]byte
	visited  map[string]struct{}
	fn       func(*Op) error
	info     *CARInfo
	op       Op // template: Kind, DID, Rev, Action
	cur      Op // the op handed to fn
	budget   decodeBudget
	lastKey  []byte // previous key yielded, for the order check
	haveLast bool
	keyBufs  [][]byte
	noCID    bool
	// noRecords: no record is decoded (the blocks are still looked up and
	// the decoding budget spent, so the walk checks what one that decodes
	// would).
	noRecords bool
}

// walk visits the MST node with CID link (binary) in key order.
func (w *mstWalker) walk(link []byte, depth int) error {
	if depth > MaxMSTDepth {
		return fmt.Errorf("mst: deeper than %d", MaxMSTDepth)
	}
	node, ok := w.blocks[string(link)]
	if !ok {
		w.info.Missing = append(w.info.Missing, MissingBlock{Kind: MissingMSTNode, CID: cidString(link)})
		return nil
	}
	if _, seen := w.visited[string(link)]; seen {
		return fmt.Errorf("mst: node %s reached twice", cidString(link))
	}
	w.visited[string(link)] = struct{}{}
	if err := scanOne(node); err != nil {
		return fmt.Errorf("mst node %s: %w", cidString(link), err)
	}
	for len(w.keyBufs) < depth {
		w.keyBufs = append(w.keyBufs, make([]byte, 0, 128))
	}
	key := w.keyBufs[depth-1][:0]
	defer func() { w.keyBufs[depth-1] = key[:0] }()

	r := cborReader{b: node}
	left, entriesAt, err := nodeFields(&r)
	if err != nil {
		return w.nodeErr(link, err)
	}
	if left != nil {
		if err := w.walk(left, depth+1); err != nil {
			return err
		}
	}
	r.off = entriesAt
	ne, err := r.arrayLen()
	if err != nil {
		return w.nodeErr(link, err)
	}
	for i := 0; i < ne; i++ {
		var (
			prefix       int64 = -1
			suffix, val  []byte
			right        []byte
			haveV, haveK bool
		)
		nf, err := r.mapLen()
		if err != nil {
			return w.nodeErr(link, err)
		}
		for j := 0; j < nf; j++ {
			k, err := r.text()
			if err != nil {
				return w.nodeErr(link, err)
			}
			switch string(k) {
			case "p":
				prefix, err = r.int()
			case "k":
				suffix, err = r.bytes()
				haveK = true
			case "v":
				val, err = r.link()
				haveV = true
			case "t":
				if !r.isNull() {
					right, err = r.link()
				}
			default:
				err = r.skip()
			}
			if err != nil {
				return w.nodeErr(link, err)
			}
		}
		if prefix < 0 || !haveK || !haveV {
			return w.nodeErr(link, errors.New("entry lacks p, k or v"))
		}
		if prefix > int64(len(key)) {
			return w.nodeErr(link, errors.New("entry prefix longer than previous key"))
		}
		if int(prefix)+len(suffix) > MaxMSTKeyLen {
			return w.nodeErr(link, errors.New("key too long"))
		}
		key = append(key[:prefix], suffix...)
		if _, err := cid.Cast(val); err != nil {
			return w.nodeErr(link, fmt.Errorf("entry value: %w", err))
		}
		if err := w.leaf(key, val); err != nil {
			return err
		}
		if right != nil {
			if err := w.walk(right, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// nodeFields reads an MST node's map: its left subtree link ("l", nil
// when null) and the offset of its entries ("e"). The fields may come in
// any order; "l" must be walked before the entries, so both are found
// first.
func nodeFields(r *cborReader) (left []byte, entriesAt int, err error) {
	n, err := r.mapLen()
	if err != nil {
		return nil, 0, err
	}
	entriesAt = -1
	for i := 0; i < n; i++ {
		k, err := r.text()
		if err != nil {
			return nil, 0, err
		}
		switch string(k) {
		case "l":
			if !r.isNull() {
				if left, err = r.link(); err != nil {
					return nil, 0, err
				}
			}
		case "e":
			entriesAt = r.off
			if err := r.skip(); err != nil {
				return nil, 0, err
			}
		default:
			if err := r.skip(); err != nil {
				return nil, 0, err
			}
		}
	}
	if entriesAt < 0 {
		return nil, 0, errors.New(`no "e" field`)
	}
	return left, entriesAt, nil
}

func (w *mstWalker) nodeErr(link []byte, err error) error {
	return fmt.Errorf("mst node %s: %w", cidString(link), err)
}

// leaf yields the op of one MST entry.
func (w *mstWalker) leaf(key, val []byte) error {
	if w.haveLast && bytes.Compare(key, w.lastKey) <= 0 {
		return fmt.Errorf("mst: key %q out of order", key)
	}
	w.lastKey = append(w.lastKey[:0], key...)
	w.haveLast = true
	op := &w.cur
	*op = w.op
	path := string(key)
	var ok bool
	op.Collection, op.RKey, ok = splitPath(path)
	if !w.noCID {
		op.CID = cidString(val)
	}
	w.info.Records++
	switch {
	case !ok:
		op.Skip = SkipBadPath
	default:
		data, found := w.blocks[string(val)]
		if !found {
			op.Skip = SkipRecordMissing
			w.info.Missing = append(w.info.Missing, MissingBlock{Kind: MissingRecord, CID: cidString(val), Path: path})
			break
		}
		if err := w.budget.spend(len(data)); err != nil {
			return err
		}
		if w.noRecords {
			break
		}
		rec, err := decodeRecordCBOR(data)
		if err != nil {
			op.Skip = SkipRecordCBOR
			break
		}
		op.Record = rec
		w.info.Decoded++
	}
	return w.fn(op)
}
