package simnet

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	lexutil "github.com/bluesky-social/indigo/lex/util"

	"github.com/eddy-backlinks/eddy/ingest/event"
)

// The event log: every event of the world in relay order, kept in memory
// as compact structs (records by reference to their immutable versions)
// and encoded on demand as relay firehose frames or Jetstream events, so
// both forms, and any replay of them, are byte-identical for a given seed
// and steps.

type evKind uint8

const (
	evCommit evKind = iota + 1
	evIdentity
	evAccount
)

type simEvent struct {
	seq    int64 // relay sequence number, from 1
	timeUS int64 // simulated time; Jetstream time_us of the first op
	kind   evKind
	did    string

	// #commit
	rev, since     string
	data, prevData dagCID
	ops            []simOp
	commit         []byte // the signed commit block (Verifiable worlds; else derived: signedOrDerived)
	proof          []byte // CAR blocks of the MST nodes that prove the ops (mstTree.appendProof)

	// #identity
	handle string

	// #account
	active bool
	status string
}

type simOp struct {
	action           event.Action
	collection, rkey string
	ver              *version // new version: creates and updates
	prev             *version // previous version: updates and deletes
}

// span is the number of Jetstream events (and time_us values) of ev.
func (ev *simEvent) span() int64 {
	if ev.kind == evCommit {
		return int64(max(1, len(ev.ops)))
	}
	return 1
}

// appendEvent numbers ev, stamps it with the simulated time (past the
// previous event's time_us range) and logs it.
func (w *World) appendEvent(ev *simEvent) {
	if n := len(w.events); n > 0 {
		last := w.events[n-1]
		w.clock = max(w.clock, last.timeUS+last.span())
	}
	ev.seq = int64(len(w.events)) + 1
	ev.timeUS = w.clock
	w.events = append(w.events, ev)
}

// snapshot returns the events logged so far and the channel closed when
// more are logged.
func (w *World) snapshot() ([]*simEvent, <-chan struct{}) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.events[:len(w.events):len(w.events)], w.notify
}

// LastSeq returns the relay sequence number of the latest event (0 when
// the log is empty). Sequence numbers run from 1 without gaps.
func (w *World) LastSeq() int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return int64(len(w.events))
}

// LastTimeUS returns the Jetstream time_us of the latest Jetstream event.
func (w *World) LastTimeUS() int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if len(w.events) == 0 {
		return 0
	}
	last := w.events[len(w.events)-1]
	return last.timeUS + last.span() - 1
}

// JetstreamCount returns the number of Jetstream events in the log (one
// per commit op, identity and account event).
func (w *World) JetstreamCount() int {
	evs, _ := w.snapshot()
	n := 0
	for _, ev := range evs {
		if ev.kind == evCommit {
			n += len(ev.ops)
		} else {
			n++
		}
	}
	return n
}

func isoTime(us int64) string { return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000Z") }

// ---- relay firehose ----

func frameHeader(t string) []byte {
	// {"t": t, "op": 1}, canonical order ("t" is shorter).
	b := make(cbor, 0, 16)
	return b.mapHeader(2).text("t").text(t).text("op").uint(1)
}

func lexLink(c dagCID) lexutil.LexLink { return lexutil.LexLink(c.Cid()) }

// frame encodes ev as a com.atproto.sync.subscribeRepos frame. A #commit
// carries the ops (with prev CIDs for updates and deletes), the previous
// MST root (prevData), and a CAR slice of the signed commit block, the MST
// nodes that prove the ops (inverting them over these nodes gives
// prevData, as Sync 1.1 asks) and the new record blocks.
func (ev *simEvent) frame() []byte {
	var buf bytes.Buffer
	var err error
	t := isoTime(ev.timeUS)
	switch ev.kind {
	case evCommit:
		buf.Write(frameHeader("#commit"))
		cb := signedOrDerived(ev.commit, ev.did, ev.data, ev.rev)
		head := sumCID(cb)
		blocks := carHeader(head)
		blocks = appendBlock(blocks, head, cb)
		blocks = append(blocks, ev.proof...)
		ops := make([]*comatproto.SyncSubscribeRepos_RepoOp, len(ev.ops))
		seen := make(map[dagCID]bool, len(ev.ops))
		for i, o := range ev.ops {
			ro := &comatproto.SyncSubscribeRepos_RepoOp{Action: o.action.String(), Path: o.collection + "/" + o.rkey}
			if o.ver != nil {
				l := lexLink(o.ver.cid)
				ro.Cid = &l
				if !seen[o.ver.cid] {
					seen[o.ver.cid] = true
					blocks = appendBlock(blocks, o.ver.cid, o.ver.cbor)
				}
			}
			if o.prev != nil {
				l := lexLink(o.prev.cid)
				ro.Prev = &l
			}
			ops[i] = ro
		}
		since := ev.since
		prevData := lexLink(ev.prevData)
		body := comatproto.SyncSubscribeRepos_Commit{
			Blobs:    []lexutil.LexLink{},
			Blocks:   blocks,
			Commit:   lexLink(head),
			Ops:      ops,
			PrevData: &prevData,
			Repo:     ev.did,
			Rev:      ev.rev,
			Seq:      ev.seq,
			Since:    &since,
			Time:     t,
		}
		err = body.MarshalCBOR(&buf)
	case evIdentity:
		buf.Write(frameHeader("#identity"))
		h := ev.handle
		body := comatproto.SyncSubscribeRepos_Identity{Did: ev.did, Handle: &h, Seq: ev.seq, Time: t}
		err = body.MarshalCBOR(&buf)
	case evAccount:
		buf.Write(frameHeader("#account"))
		body := comatproto.SyncSubscribeRepos_Account{Active: ev.active, Did: ev.did, Seq: ev.seq, Time: t}
		if ev.status != "" {
			s := ev.status
			body.Status = &s
		}
		err = body.MarshalCBOR(&buf)
	}
	if err != nil {
		panic("simnet: encoding frame: " + err.Error()) // cannot happen: writes to a bytes.Buffer
	}
	return buf.Bytes()
}

// FirehoseFrames calls fn with every relay firehose frame of sequence
// number above after, in order, up to the latest event logged when it is
// called. An error from fn stops it and is returned.
func (w *World) FirehoseFrames(after int64, fn func(seq int64, frame []byte) error) error {
	evs, _ := w.snapshot()
	for i := max(after, 0); i < int64(len(evs)); i++ {
		if err := fn(evs[i].seq, evs[i].frame()); err != nil {
			return err
		}
	}
	return nil
}

// WriteFirehose writes every frame as [u32 little-endian length][frame],
// the format event.ReadFrames and eddy-ctl read.
func (w *World) WriteFirehose(out io.Writer) error {
	bw := bufio.NewWriter(out)
	var hdr [4]byte
	err := w.FirehoseFrames(0, func(_ int64, f []byte) error {
		binary.LittleEndian.PutUint32(hdr[:], uint32(len(f)))
		if _, err := bw.Write(hdr[:]); err != nil {
			return err
		}
		_, err := bw.Write(f)
		return err
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// ---- Jetstream ----

type jsOut struct {
	DID      string      `json:"did"`
	TimeUS   int64       `json:"time_us"`
	Kind     string      `json:"kind"`
	Commit   *jsCommit   `json:"commit,omitempty"`
	Identity *jsIdentity `json:"identity,omitempty"`
	Account  *jsAccount  `json:"account,omitempty"`
}

type jsCommit struct {
	Rev        string          `json:"rev"`
	Operation  string          `json:"operation"`
	Collection string          `json:"collection"`
	RKey       string          `json:"rkey"`
	Record     json.RawMessage `json:"record,omitempty"`
	CID        string          `json:"cid,omitempty"`
}

type jsIdentity struct {
	DID    string `json:"did"`
	Handle string `json:"handle,omitempty"`
	Seq    int64  `json:"seq"`
	Time   string `json:"time"`
}

type jsAccount struct {
	Active bool   `json:"active"`
	DID    string `json:"did"`
	Seq    int64  `json:"seq"`
	Status string `json:"status,omitempty"`
	Time   string `json:"time"`
}

// recordJSON renders a record block as atproto JSON, keys sorted, as
// Jetstream does.
func recordJSON(b []byte) json.RawMessage {
	m, err := atdata.UnmarshalCBOR(b)
	if err != nil {
		panic("simnet: own record does not decode: " + err.Error())
	}
	j, err := json.Marshal(m)
	if err != nil {
		panic("simnet: own record does not encode as JSON: " + err.Error())
	}
	return j
}

// jetstreamOps calls fn with ev's Jetstream v1 events whose time_us is at
// least cursor, with the collection of commit events ("" for others): one
// per commit op (time_us = the event's time plus the op's index), or one
// identity or account event.
func (ev *simEvent) jetstreamOps(cursor int64, fn func(timeUS int64, collection string, msg []byte) error) error {
	emit := func(o *jsOut, coll string) error {
		if o.TimeUS < cursor {
			return nil
		}
		b, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("simnet: jetstream event: %w", err)
		}
		return fn(o.TimeUS, coll, b)
	}
	switch ev.kind {
	case evCommit:
		for i, op := range ev.ops {
			if ev.timeUS+int64(i) < cursor {
				continue
			}
			c := &jsCommit{Rev: ev.rev, Operation: op.action.String(), Collection: op.collection, RKey: op.rkey}
			if op.ver != nil {
				c.Record = recordJSON(op.ver.cbor)
				c.CID = op.ver.cid.String()
			}
			if err := emit(&jsOut{DID: ev.did, TimeUS: ev.timeUS + int64(i), Kind: "commit", Commit: c}, op.collection); err != nil {
				return err
			}
		}
		return nil
	case evIdentity:
		return emit(&jsOut{DID: ev.did, TimeUS: ev.timeUS, Kind: "identity",
			Identity: &jsIdentity{DID: ev.did, Handle: ev.handle, Seq: ev.seq, Time: isoTime(ev.timeUS)}}, "")
	case evAccount:
		return emit(&jsOut{DID: ev.did, TimeUS: ev.timeUS, Kind: "account",
			Account: &jsAccount{Active: ev.active, DID: ev.did, Seq: ev.seq, Status: ev.status, Time: isoTime(ev.timeUS)}}, "")
	}
	return nil
}

// jetstreamStart returns the index of the first event with a Jetstream
// event at or after cursor.
func jetstreamStart(evs []*simEvent, cursor int64) int {
	return sort.Search(len(evs), func(i int) bool { return evs[i].timeUS+evs[i].span()-1 >= cursor })
}

// JetstreamEvents calls fn with every Jetstream v1 event (uncompressed
// JSON) whose time_us is at least cursor (Jetstream's cursor is
// inclusive), in order, up to the latest event logged when it is called.
// An error from fn stops it and is returned.
func (w *World) JetstreamEvents(cursor int64, fn func(timeUS int64, msg []byte) error) error {
	evs, _ := w.snapshot()
	for _, ev := range evs[jetstreamStart(evs, cursor):] {
		err := ev.jetstreamOps(cursor, func(t int64, _ string, msg []byte) error { return fn(t, msg) })
		if err != nil {
			return err
		}
	}
	return nil
}

// WriteJetstream writes every Jetstream event as JSON lines.
func (w *World) WriteJetstream(out io.Writer) error {
	bw := bufio.NewWriter(out)
	err := w.JetstreamEvents(0, func(_ int64, msg []byte) error {
		if _, err := bw.Write(msg); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}
