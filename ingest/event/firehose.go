package event

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/ipfs/go-cid"
)

// MaxFrameSize is the largest firehose frame accepted, by ReadFrames and
// DecodeFrame: atproto caps event stream frames at 5 MiB.
const MaxFrameSize = 5 << 20

// maxFrameBlocks bounds the blocks of one commit's CAR slice. A 5 MiB
// frame cannot hold more than about 130,000 minimal blocks; real commits
// hold a handful.
const maxFrameBlocks = 1 << 17

// StreamError is an error frame (header op -1) sent by a relay, such as
// FutureCursor or ConsumerTooSlow. DecodeFrame returns it as its error.
type StreamError struct {
	Name    string // "error" field
	Message string // "message" field, may be empty
}

func (e *StreamError) Error() string {
	if e.Message == "" {
		return "firehose error frame: " + e.Name
	}
	return "firehose error frame: " + e.Name + ": " + e.Message
}

// ReadFrames reads frames stored as [u32 little-endian length][frame]
// records and calls fn with each frame. The slice passed to fn is reused
// for the next frame: fn must not keep it (DecodeFrame does not). A clean
// end of input between records ends ReadFrames with nil; a truncated
// record is io.ErrUnexpectedEOF; a length above MaxFrameSize is an error.
// An error from fn stops reading and is returned.
func ReadFrames(r io.Reader, fn func(frame []byte) error) error {
	return ReadFramesPast(r, fn, nil)
}

// ReadFramesPast is ReadFrames, but a record above MaxFrameSize is read
// past (its bytes discarded) and given to tooBig, which may stop the
// reading with an error, instead of ending it; tooBig nil is ReadFrames.
func ReadFramesPast(r io.Reader, fn func(frame []byte) error, tooBig func(n uint32) error) error {
	var hdr [4]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n > MaxFrameSize && tooBig != nil {
			if m, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
				if err == io.EOF && m < int64(n) {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
			if err := tooBig(n); err != nil {
				return err
			}
			continue
		}
		if n > MaxFrameSize {
			return fmt.Errorf("frame of %d bytes exceeds MaxFrameSize", n)
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
}

// frameState is per-call scratch space, pooled to keep DecodeFrame's
// allocations to what it returns.
type frameState struct {
	blocks map[string][]byte
	op     Op
}

var framePool = sync.Pool{New: func() any {
	return &frameState{blocks: make(map[string][]byte, 16)}
}}

// DecodeFrame decodes one relay firehose frame
// (com.atproto.sync.subscribeRepos: a DAG-CBOR header {op, t} followed by
// a DAG-CBOR body) and calls fn for each op it yields:
//
//   - #commit: one KindCommit op per repo op, with Seq, DID, Rev, Action,
//     Collection, RKey and (not for deletes) CID; the record is looked up by
//     CID in the commit's CAR slice ("blocks") and decoded into the atdata
//     data model (see Op.Record and decodeRecord). A
//     record block that is absent yields Skip "record_missing" ("too_big"
//     when the commit is flagged tooBig, whose blocks relays leave out); one
//     that is not valid data, Skip "record_cbor"; a path that is not
//     "collection/rkey", Skip "bad_path"; an unknown action, Skip
//     "bad_action". A commit with no ops yields nothing. A commit the
//     relay flagged tooBig (its blocks, and from a PDS its ops, left out)
//     yields, after its ops (Skip "too_big"), a KindSync op of its
//     repository: only the repository itself can give its records.
//   - #identity: one KindIdentity op (Seq, DID, Handle if present).
//   - #account: one KindAccount op (Seq, DID, Active, Status).
//   - #sync: one KindSync op (Seq, DID, Rev): the repository is now at Rev
//     with no ops given; a consumer whose copy is older must re-fetch it.
//   - #info (such as OutdatedCursor) yields nothing and returns an *Info
//     (to log, not to stop on); a message type it does not know yields
//     nothing and an error wrapping ErrUnknownType (to count, not to stop
//     on).
//   - an error frame (header op -1) returns a *StreamError.
//
// Every op of a #commit, #identity, #account or #sync frame has Time set
// from the frame's "time" (zero when it is not a valid datetime).
//
// The *Op passed to fn is reused between calls: fn may copy *op, but must
// not keep the pointer. The op's strings and Record do not alias frame.
//
// A malformed frame (bad CBOR, bytes after the body, a body that does not
// decode as its type, a bad CAR slice) is an error and yields no op. An
// error from fn stops decoding and is returned; so does a commit whose ops
// name one record block so often that decoding would exceed twice the
// frame's size (a hostile frame), after the ops already delivered.
//
// Block hashes are not checked against their CIDs and signatures are not
// verified: the relay is trusted for that.
func DecodeFrame(frame []byte, fn func(*Op) error) error {
	if len(frame) > MaxFrameSize {
		return fmt.Errorf("frame of %d bytes exceeds MaxFrameSize", len(frame))
	}
	hdrEnd, err := scanItem(frame, 0, 0)
	if err != nil {
		return fmt.Errorf("frame header: %w", err)
	}
	bodyEnd, err := scanItem(frame, hdrEnd, 0)
	if err != nil {
		return fmt.Errorf("frame body: %w", err)
	}
	if bodyEnd != len(frame) {
		return errors.New("frame: trailing bytes after body")
	}
	op, typ, err := frameHeader(frame[:hdrEnd])
	if err != nil {
		return err
	}
	body := frame[hdrEnd:]
	switch op {
	case 1:
	case -1:
		return decodeErrorFrame(body)
	default:
		return fmt.Errorf("frame header: unknown op %d", op)
	}
	st := framePool.Get().(*frameState)
	defer func() {
		if len(st.blocks) > 256 {
			st.blocks = make(map[string][]byte, 16) // do not keep a huge map pooled
		} else {
			clear(st.blocks)
		}
		st.op = Op{}
		framePool.Put(st)
	}()
	o := &st.op
	switch typ {
	case "#commit":
		return decodeCommitFrame(body, st, fn)
	case "#identity":
		var ev comatproto.SyncSubscribeRepos_Identity
		if err := ev.UnmarshalCBOR(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("#identity: %w", err)
		}
		*o = Op{Kind: KindIdentity, DID: ev.Did, Seq: ev.Seq, Time: frameTime(ev.Time)}
		if ev.Handle != nil {
			o.Handle = *ev.Handle
		}
		return fn(o)
	case "#account":
		var ev comatproto.SyncSubscribeRepos_Account
		if err := ev.UnmarshalCBOR(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("#account: %w", err)
		}
		*o = Op{Kind: KindAccount, DID: ev.Did, Seq: ev.Seq, Active: ev.Active, Time: frameTime(ev.Time)}
		if ev.Status != nil {
			o.Status = *ev.Status
		}
		return fn(o)
	case "#sync":
		var ev comatproto.SyncSubscribeRepos_Sync
		if err := ev.UnmarshalCBOR(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("#sync: %w", err)
		}
		*o = Op{Kind: KindSync, DID: ev.Did, Seq: ev.Seq, Rev: ev.Rev, Time: frameTime(ev.Time)}
		return fn(o)
	case "#info":
		var ev comatproto.SyncSubscribeRepos_Info
		if err := ev.UnmarshalCBOR(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("#info: %w", err)
		}
		info := &Info{Name: ev.Name}
		if ev.Message != nil {
			info.Message = *ev.Message
		}
		return info
	}
	return fmt.Errorf("frame type %q: %w", typ, ErrUnknownType)
}

// Info is a relay's #info message. OutdatedCursor says the cursor asked for
// is older than what the relay keeps: the stream starts at its oldest event,
// and the events between are not in it.
type Info struct{ Name, Message string }

func (i *Info) Error() string { return "relay info " + i.Name + ": " + i.Message }

// frameTime reads a frame's "time" (an atproto datetime: RFC 3339 with a
// timezone), in UTC; zero when it is absent or not one.
func frameTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// ErrUnknownType wraps the error DecodeFrame returns for a well-formed
// frame of a message type it does not know: nothing to index, but a
// consumer counts it (a relay speaking a newer protocol).
var ErrUnknownType = errors.New("unknown firehose message type")

// frameHeader decodes the header {op: int, t: string}. (indigo's
// events.EventHeader would do, but importing indigo/events brings gorm,
// OpenTelemetry and Prometheus into every binary that decodes frames.)
func frameHeader(b []byte) (op int64, typ string, err error) {
	r := cborReader{b: b}
	n, err := r.mapLen()
	if err != nil {
		return 0, "", fmt.Errorf("frame header: %w", err)
	}
	haveOp := false
	for i := 0; i < n; i++ {
		k, err := r.text()
		if err != nil {
			return 0, "", fmt.Errorf("frame header: %w", err)
		}
		switch string(k) {
		case "op":
			op, err = r.int()
			haveOp = true
		case "t":
			var t []byte
			t, err = r.text()
			typ = string(t)
		default:
			err = r.skip()
		}
		if err != nil {
			return 0, "", fmt.Errorf("frame header: %w", err)
		}
	}
	if !haveOp {
		return 0, "", errors.New("frame header: no op")
	}
	return op, typ, nil
}

func decodeErrorFrame(body []byte) error {
	r := cborReader{b: body}
	n, err := r.mapLen()
	if err != nil {
		return fmt.Errorf("error frame: %w", err)
	}
	se := &StreamError{}
	for i := 0; i < n; i++ {
		k, err := r.text()
		if err != nil {
			return fmt.Errorf("error frame: %w", err)
		}
		switch string(k) {
		case "error", "message":
			if m, _ := r.peekMajor(); m != majText {
				err = r.skip()
				break
			}
			var s []byte
			if s, err = r.text(); err == nil {
				if string(k) == "error" {
					se.Name = string(s)
				} else {
					se.Message = string(s)
				}
			}
		default:
			err = r.skip()
		}
		if err != nil {
			return fmt.Errorf("error frame: %w", err)
		}
	}
	return se
}

func decodeCommitFrame(body []byte, st *frameState, fn func(*Op) error) error {
	var ev comatproto.SyncSubscribeRepos_Commit
	if err := ev.UnmarshalCBOR(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("#commit: %w", err)
	}
	if err := decodeCommitOps(&ev, len(body), st, fn); err != nil || !ev.TooBig {
		return err
	}
	// The relay left the commit's blocks out (and a PDS its ops): after
	// what ops it lists, a KindSync op of the repository, whose records
	// only the repository itself can give.
	st.op = Op{Kind: KindSync, DID: ev.Repo, Seq: ev.Seq, Rev: ev.Rev, Time: frameTime(ev.Time)}
	return fn(&st.op)
}

// decodeCommitOps yields the ops of a decoded #commit of bodyBytes.
func decodeCommitOps(ev *comatproto.SyncSubscribeRepos_Commit, bodyBytes int, st *frameState, fn func(*Op) error) error {
	if len(ev.Ops) == 0 {
		return nil
	}
	if len(ev.Blocks) > 0 {
		_, off, err := carHeader(ev.Blocks)
		if err != nil {
			return fmt.Errorf("#commit blocks: %w", err)
		}
		blocks := st.blocks
		if _, err := carBlocks(ev.Blocks, off, maxFrameBlocks, func(c, data []byte) {
			if _, dup := blocks[string(c)]; !dup {
				blocks[string(c)] = data
			}
		}); err != nil {
			return fmt.Errorf("#commit blocks: %w", err)
		}
	}
	o := &st.op
	budget := newDecodeBudget(bodyBytes)
	at := frameTime(ev.Time)
	for _, rop := range ev.Ops {
		if rop == nil {
			continue
		}
		*o = Op{Kind: KindCommit, DID: ev.Repo, Seq: ev.Seq, Rev: ev.Rev, Time: at, Action: parseAction(rop.Action)}
		var ok bool
		o.Collection, o.RKey, ok = splitPath(rop.Path)
		switch {
		case !ok:
			o.Skip = SkipBadPath
		case o.Action == ActionUnknown:
			o.Skip = SkipBadAction
		case o.Action == ActionDelete:
		case rop.Cid == nil:
			o.Skip = SkipRecordMissing
		case !cid.Cid(*rop.Cid).Defined():
			o.Skip = SkipRecordMissing
		default:
			c := cid.Cid(*rop.Cid)
			o.CID = c.String()
			data, found := st.blocks[c.KeyString()]
			if !found {
				if ev.TooBig {
					o.Skip = SkipTooBig
				} else {
					o.Skip = SkipRecordMissing
				}
				break
			}
			if err := budget.spend(len(data)); err != nil {
				return fmt.Errorf("#commit: %w", err)
			}
			rec, err := decodeRecordCBOR(data)
			if err != nil {
				o.Skip = SkipRecordCBOR
				break
			}
			o.Record = rec
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}
