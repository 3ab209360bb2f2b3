package simnet

import (
	"crypto/sha256"
	"sort"
)

// The Merkle Search Tree of atproto repositories (format v3): keys
// "collection/rkey", each at the layer given by the number of leading
// zero bit pairs of SHA-256(key); a node at layer L holds the keys of layer
// L in order, and between them (and before the first, after the last) a
// pointer to a subtree of layer L-1 holding the keys in that gap. The root
// is at the highest layer of any key; the empty tree is one empty node.
//
// mstTree is updated in place in O(depth) nodes per insert or remove, and
// caches each node's CID, so the MST root of every commit costs a few
// node encodings. buildMST is the obvious from-scratch construction; the
// tests hold the two to the same CIDs, and buildMST to real repositories.

// keyLayer is the MST layer of a key.
func keyLayer(key string) int {
	h := sha256.Sum256([]byte(key))
	layer := 0
	for _, b := range h {
		if b == 0 {
			layer += 4
			continue
		}
		switch {
		case b&0xfc == 0:
			layer += 3
		case b&0xf0 == 0:
			layer += 2
		case b&0xc0 == 0:
			layer++
		}
		break
	}
	return layer
}

type mstEntry struct {
	key   string
	val   dagCID
	right *mstNode // subtree of the gap after this entry, nil if empty
}

type mstNode struct {
	layer   int
	left    *mstNode // subtree of the gap before the first entry
	entries []mstEntry
	cid     dagCID
	clean   bool // cid is current
}

// gap returns a pointer to the child slot of gap i (0: before entry 0;
// i: after entry i-1).
func (n *mstNode) gap(i int) **mstNode {
	if i == 0 {
		return &n.left
	}
	return &n.entries[i-1].right
}

// search returns the number of entries with key < k and whether entry at
// that index has key k.
func (n *mstNode) search(k string) (int, bool) {
	i := sort.Search(len(n.entries), func(i int) bool { return n.entries[i].key >= k })
	return i, i < len(n.entries) && n.entries[i].key == k
}

// empty reports whether n holds nothing (no entries, no subtree).
func (n *mstNode) empty() bool { return len(n.entries) == 0 && n.left == nil }

// mstTree is a repository's MST. The zero value is the empty tree.
type mstTree struct {
	root *mstNode // nil when empty
	n    int
	buf  []byte // scratch space of Root
}

// Len is the number of keys.
func (t *mstTree) Len() int { return t.n }

// wrap lifts node n (nil allowed) to layer by adding nodes with no entries
// above it.
func wrap(n *mstNode, layer int) *mstNode {
	if n == nil {
		return nil
	}
	for n.layer < layer {
		n = &mstNode{layer: n.layer + 1, left: n}
	}
	return n
}

// Put inserts or replaces key k with value v.
func (t *mstTree) Put(k string, v dagCID) {
	h := keyLayer(k)
	if t.root == nil {
		t.root = &mstNode{layer: h, entries: []mstEntry{{key: k, val: v}}}
		t.n++
		return
	}
	if h > t.root.layer {
		l, r := mstSplit(t.root, k)
		t.root = &mstNode{layer: h, left: wrap(l, h-1), entries: []mstEntry{{key: k, val: v, right: wrap(r, h-1)}}}
		t.n++
		return
	}
	var added bool
	t.root, added = mstPut(t.root, t.root.layer, k, h, v)
	if added {
		t.n++
	}
}

// mstPut inserts k (of layer h) into the subtree n of layer `layer` (n may
// be nil: an empty gap) and returns the new subtree.
func mstPut(n *mstNode, layer int, k string, h int, v dagCID) (*mstNode, bool) {
	if n == nil {
		return wrap(&mstNode{layer: h, entries: []mstEntry{{key: k, val: v}}}, layer), true
	}
	n.clean = false
	i, found := n.search(k)
	if n.layer == h {
		if found {
			n.entries[i].val = v
			return n, false
		}
		l, r := mstSplit(*n.gap(i), k)
		*n.gap(i) = l
		n.entries = append(n.entries, mstEntry{})
		copy(n.entries[i+1:], n.entries[i:])
		n.entries[i] = mstEntry{key: k, val: v, right: r}
		return n, true
	}
	child, added := mstPut(*n.gap(i), n.layer-1, k, h, v)
	*n.gap(i) = child
	return n, added
}

// mstSplit splits subtree n around k (not in n) into the keys below k and
// the keys above, both subtrees of n's layer (nil when empty). n is
// consumed.
func mstSplit(n *mstNode, k string) (*mstNode, *mstNode) {
	if n == nil {
		return nil, nil
	}
	i, _ := n.search(k)
	gl, gr := mstSplit(*n.gap(i), k)
	right := &mstNode{layer: n.layer, left: gr, entries: append([]mstEntry(nil), n.entries[i:]...)}
	n.entries = n.entries[:i:i]
	*n.gap(i) = gl
	n.clean = false
	left := n
	if left.empty() {
		left = nil
	}
	if right.empty() {
		right = nil
	}
	return left, right
}

// Delete removes k; it reports whether k was present.
func (t *mstTree) Delete(k string) bool {
	if t.root == nil {
		return false
	}
	h := keyLayer(k)
	if h > t.root.layer {
		return false
	}
	var removed bool
	t.root, removed = mstDelete(t.root, k, h)
	if !removed {
		return false
	}
	t.n--
	// The root is at the highest layer that holds a key.
	for t.root != nil && len(t.root.entries) == 0 {
		t.root = t.root.left
	}
	return true
}

func mstDelete(n *mstNode, k string, h int) (*mstNode, bool) {
	if n == nil {
		return nil, false
	}
	i, found := n.search(k)
	if n.layer == h {
		if !found {
			return n, false
		}
		n.clean = false
		merged := mstMerge(*n.gap(i), n.entries[i].right)
		n.entries = append(n.entries[:i], n.entries[i+1:]...)
		*n.gap(i) = merged
	} else {
		child, removed := mstDelete(*n.gap(i), k, h)
		if !removed {
			return n, false
		}
		n.clean = false
		*n.gap(i) = child
	}
	if n.empty() {
		return nil, true
	}
	return n, true
}

// mstMerge joins two subtrees of the same layer whose keys are all in a
// before all in b.
func mstMerge(a, b *mstNode) *mstNode {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	last := a.gap(len(a.entries))
	*last = mstMerge(*last, b.left)
	a.entries = append(a.entries, b.entries...)
	a.clean = false
	return a
}

// Root returns the CID of the root node, encoding the nodes changed since
// the last call.
func (t *mstTree) Root() dagCID {
	if t.root == nil {
		return emptyMSTRoot
	}
	return mstCID(t.root, &t.buf)
}

var emptyMSTRoot = sumCID(encodeMSTNode(nil, nil))

// mstCID returns n's CID, encoding n and its changed descendants (in buf,
// scratch space) when n changed.
func mstCID(n *mstNode, buf *[]byte) dagCID {
	if n.clean {
		return n.cid
	}
	if n.left != nil {
		mstCID(n.left, buf)
	}
	for _, e := range n.entries {
		if e.right != nil {
			mstCID(e.right, buf)
		}
	}
	*buf = n.appendEncoding((*buf)[:0])
	n.cid = sumCID(*buf)
	n.clean = true
	return n.cid
}

// appendEncoding appends n's DAG-CBOR encoding {e: [{k, p, t, v}…], l}
// (keys in canonical order: "e" < "l"; "k" < "p" < "t" < "v"). Its
// children's CIDs must be current.
func (n *mstNode) appendEncoding(b cbor) cbor {
	b = b.mapHeader(2).text("e").array(len(n.entries))
	prev := ""
	for _, e := range n.entries {
		p := 0
		for p < len(prev) && p < len(e.key) && prev[p] == e.key[p] {
			p++
		}
		b = b.mapHeader(4)
		b = b.text("k").head(2, uint64(len(e.key)-p))
		b = append(b, e.key[p:]...)
		b = b.text("p").uint(uint64(p))
		b = b.text("t")
		if e.right != nil {
			b = b.link(e.right.cid)
		} else {
			b = b.null()
		}
		b = b.text("v").link(e.val)
		prev = e.key
	}
	b = b.text("l")
	if n.left != nil {
		return b.link(n.left.cid)
	}
	return b.null()
}

type mstEntryData struct {
	key   string
	val   dagCID
	right *dagCID
}

// encodeMSTNode encodes a node {e: [{k, p, t, v}…], l}: the reference
// encoder of buildMST, written apart from appendEncoding.
func encodeMSTNode(left *dagCID, entries []mstEntryData) []byte {
	b := make(cbor, 0, 16+len(entries)*80)
	b = b.mapHeader(2)
	b = b.text("e")
	b = b.array(len(entries))
	prev := ""
	for _, e := range entries {
		p := 0
		for p < len(prev) && p < len(e.key) && prev[p] == e.key[p] {
			p++
		}
		b = b.mapHeader(4)
		b = b.text("k").bytes([]byte(e.key[p:]))
		b = b.text("p").uint(uint64(p))
		b = b.text("t").optLink(e.right)
		b = b.text("v").link(e.val)
		prev = e.key
	}
	b = b.text("l").optLink(left)
	return b
}

// walk calls node for every node in pre-order and leaf for every entry in
// key order. The tree's CIDs must be current (Root called since the last
// change): walk only reads, so it may run concurrently with other walks.
// The block passed to node is reused by the next call.
func (t *mstTree) walk(node func(c dagCID, block []byte), leaf func(key string, val dagCID)) {
	if t.root == nil {
		node(emptyMSTRoot, encodeMSTNode(nil, nil))
		return
	}
	var buf cbor
	var rec func(n *mstNode)
	rec = func(n *mstNode) {
		buf = n.appendEncoding(buf[:0])
		node(n.cid, buf)
		if n.left != nil {
			rec(n.left)
		}
		for _, e := range n.entries {
			leaf(e.key, e.val)
			if e.right != nil {
				rec(e.right)
			}
		}
	}
	rec(t.root)
}

// mstKV is a key and value for buildMST.
type mstKV struct {
	Key string
	Val dagCID
}

// buildMST builds the tree of kvs (sorted by key, no duplicates) from
// scratch and returns its root CID: the reference construction.
func buildMST(kvs []mstKV) dagCID {
	if len(kvs) == 0 {
		return emptyMSTRoot
	}
	layers := make([]int, len(kvs))
	top := 0
	for i, kv := range kvs {
		layers[i] = keyLayer(kv.Key)
		top = max(top, layers[i])
	}
	var build func(lo, hi, layer int) *dagCID
	build = func(lo, hi, layer int) *dagCID {
		if lo == hi {
			return nil
		}
		var left *dagCID
		var entries []mstEntryData
		start := lo
		for i := lo; i < hi; i++ {
			if layers[i] != layer {
				continue
			}
			sub := build(start, i, layer-1)
			if len(entries) == 0 {
				left = sub
			} else {
				entries[len(entries)-1].right = sub
			}
			entries = append(entries, mstEntryData{key: kvs[i].Key, val: kvs[i].Val})
			start = i + 1
		}
		sub := build(start, hi, layer-1)
		if len(entries) == 0 {
			left = sub
		} else {
			entries[len(entries)-1].right = sub
		}
		c := sumCID(encodeMSTNode(left, entries))
		return &c
	}
	return *build(0, len(kvs), top)
}

// appendProof appends to out, as CAR blocks, the nodes of the current
// tree (its CIDs current: Root called since the last change) that a
// verifier needs to check ops against it and to invert them into the
// tree before (Sync 1.1): for each op's key, the nodes on its search path
// and, where the key is found, the nodes along the facing edges of the
// two subtrees beside it (which a removal of the key merges). Inverting a
// create removes the key, inverting a delete inserts it again (splitting
// the subtree on its search path), inverting an update replaces a value
// on the path: each reads only these nodes.
func (t *mstTree) appendProof(out []byte, ops []simOp) []byte {
	if t.root == nil {
		return appendBlock(out, emptyMSTRoot, encodeMSTNode(nil, nil))
	}
	seen := make(map[*mstNode]bool)
	var buf cbor
	emit := func(n *mstNode) {
		if seen[n] {
			return
		}
		seen[n] = true
		buf = n.appendEncoding(buf[:0])
		out = appendBlock(out, n.cid, buf)
	}
	for _, op := range ops {
		k := op.collection + "/" + op.rkey
		for n := t.root; n != nil; {
			emit(n)
			i, found := n.search(k)
			if !found {
				n = *n.gap(i)
				continue
			}
			for c := *n.gap(i); c != nil; c = *c.gap(len(c.entries)) {
				emit(c) // the left subtree's right edge
			}
			for c := n.entries[i].right; c != nil; c = c.left {
				emit(c) // the right subtree's left edge
			}
			break
		}
	}
	return out
}
