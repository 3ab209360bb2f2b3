package event

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/klauspost/compress/zstd"
)

// MaxJetstreamMessageSize is the largest Jetstream message accepted, by
// DecodeJetstream and as the output of Decompress. A record is at most
// 1 MiB of CBOR, which its JSON can take six times over (a string of
// control characters, or of <, > and &, is written as \u0001 or \u003c
// escapes); the envelope adds little. Before, the bound was atdata's 2 MiB
// of JSON, and a valid record past it was dropped with its event: an
// update's old links stayed live. A record past atdata's bound is now
// decoded as far as its path (SkipRecordTooBig).
const MaxJetstreamMessageSize = 6<<20 + 64<<10

// ErrUnknownKind wraps the error DecodeJetstream returns for an event
// whose kind is not commit, identity or account. Callers that want to
// skip such events can test for it with errors.Is.
var ErrUnknownKind = errors.New("unknown jetstream event kind")

type jsEvent struct {
	DID      string      `json:"did"`
	TimeUS   int64       `json:"time_us"`
	Cursor   int64       `json:"cursor"` // a Jetstream v2 server's seq; absent from v1 servers
	Kind     string      `json:"kind"`
	Commit   *jsCommit   `json:"commit"`
	Identity *jsIdentity `json:"identity"`
	Account  *jsAccount  `json:"account"`
}

type jsCommit struct {
	Rev        string          `json:"rev"`
	Operation  string          `json:"operation"`
	Collection string          `json:"collection"`
	RKey       string          `json:"rkey"`
	Record     json.RawMessage `json:"record"`
	CID        string          `json:"cid"`
}

type jsIdentity struct {
	DID    string  `json:"did"`
	Handle *string `json:"handle"`
	Seq    int64   `json:"seq"`
}

type jsAccount struct {
	DID    string  `json:"did"`
	Active bool    `json:"active"`
	Status *string `json:"status"`
	Seq    int64   `json:"seq"`
}

// DecodeJetstream decodes one Jetstream v1 event (a JSON object as sent on
// the /subscribe websocket, uncompressed). Seq is the event's time_us,
// Time the same as a time (zero when time_us is not positive);
// Cursor its "cursor", the sequence number a Jetstream v2 server adds to
// its v1 events (0 when absent, as from a v1 server).
//
//   - kind "commit": a KindCommit op with DID, Rev, Action, Collection,
//     RKey, CID and, for creates and updates, Record decoded by
//     atdata.UnmarshalJSON. A record that is not valid atproto data yields
//     the op with Skip "record_json"; a create or update without a record,
//     Skip "record_missing"; an unknown operation, Skip "bad_action"; an
//     empty collection or rkey, or one containing "/", Skip "bad_path".
//   - kind "identity": KindIdentity with DID and Handle (if present).
//   - kind "account": KindAccount with DID, Active and Status.
//   - any other kind: an error wrapping ErrUnknownKind.
//
// Malformed JSON, a missing did, or a kind without its object is an error.
func DecodeJetstream(msg []byte) (Op, error) {
	if len(msg) > MaxJetstreamMessageSize {
		return Op{}, fmt.Errorf("jetstream: message of %d bytes exceeds MaxJetstreamMessageSize", len(msg))
	}
	var ev jsEvent
	if err := json.Unmarshal(msg, &ev); err != nil {
		return Op{}, fmt.Errorf("jetstream: %w", err)
	}
	if ev.DID == "" {
		return Op{}, errors.New("jetstream: event without did")
	}
	if ev.Cursor < 0 {
		return Op{}, fmt.Errorf("jetstream: negative cursor %d", ev.Cursor)
	}
	op := Op{DID: ev.DID, Seq: ev.TimeUS, Cursor: ev.Cursor}
	if ev.TimeUS > 0 {
		op.Time = time.UnixMicro(ev.TimeUS).UTC()
	}
	switch ev.Kind {
	case "commit":
		c := ev.Commit
		if c == nil {
			return Op{}, errors.New("jetstream: commit event without commit")
		}
		op.Kind = KindCommit
		op.Rev = c.Rev
		op.Action = parseAction(c.Operation)
		op.Collection, op.RKey = c.Collection, c.RKey
		switch {
		case !validPathPart(c.Collection) || !validPathPart(c.RKey):
			op.Skip = SkipBadPath
		case op.Action == ActionUnknown:
			op.Skip = SkipBadAction
		case op.Action == ActionDelete:
		default:
			op.CID = c.CID
			if len(c.Record) == 0 || string(c.Record) == "null" {
				op.Skip = SkipRecordMissing
				break
			}
			if len(c.Record) > atdata.MAX_JSON_RECORD_SIZE {
				op.Skip = SkipRecordTooBig // valid, but past what the JSON decoder takes
				break
			}
			rec, err := atdata.UnmarshalJSON(c.Record)
			if err != nil {
				op.Skip = SkipRecordJSON
				break
			}
			op.Record = rec
		}
	case "identity":
		if ev.Identity == nil {
			return Op{}, errors.New("jetstream: identity event without identity")
		}
		op.Kind = KindIdentity
		op.RelaySeq = ev.Identity.Seq
		if ev.Identity.Handle != nil {
			op.Handle = *ev.Identity.Handle
		}
	case "account":
		if ev.Account == nil {
			return Op{}, errors.New("jetstream: account event without account")
		}
		op.Kind = KindAccount
		op.RelaySeq = ev.Account.Seq
		op.Active = ev.Account.Active
		if ev.Account.Status != nil {
			op.Status = *ev.Account.Status
		}
	default:
		return Op{}, fmt.Errorf("jetstream: kind %q: %w", ev.Kind, ErrUnknownKind)
	}
	return op, nil
}

func validPathPart(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return false
		}
	}
	return true
}

// jetstreamDict is the zstd dictionary with which Jetstream v1 compresses
// each message when a client subscribes with compress=true (dictionary id
// 1612007021; a copy of bluesky-social/jetstream's
// internal/subscribe/dictionaries/legacy_subscribe.zdict, see
// testdata/SOURCES.md).
//
//go:embed jetstream.zdict
var jetstreamDict []byte

// JetstreamDict returns a copy of the embedded Jetstream zstd dictionary.
func JetstreamDict() []byte { return append([]byte(nil), jetstreamDict...) }

// JetstreamDecompressor decompresses Jetstream messages sent with
// compress=true: each websocket message is one zstd frame made with
// Jetstream's dictionary. It is safe for concurrent use.
type JetstreamDecompressor struct {
	dec *zstd.Decoder
}

// NewJetstreamDecompressor returns a decompressor loaded with the embedded
// dictionary. Output is limited to MaxJetstreamMessageSize per message.
func NewJetstreamDecompressor() (*JetstreamDecompressor, error) {
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderDicts(jetstreamDict),
		zstd.WithDecoderMaxMemory(MaxJetstreamMessageSize),
		zstd.WithDecoderMaxWindow(MaxJetstreamMessageSize),
		zstd.WithDecoderConcurrency(0),
	)
	if err != nil {
		return nil, fmt.Errorf("jetstream zstd: %w", err)
	}
	return &JetstreamDecompressor{dec: dec}, nil
}

// Decompress returns the decompressed message src. Like snappy.Decode,
// it uses dst's storage (from dst[:0]) when it is large enough, so a
// caller can pass the previous result back in to reuse one buffer; dst's
// contents are overwritten. A message that would decompress to more than
// MaxJetstreamMessageSize is an error.
func (d *JetstreamDecompressor) Decompress(dst, src []byte) ([]byte, error) {
	out, err := d.dec.DecodeAll(src, dst[:0])
	if err != nil {
		return nil, fmt.Errorf("jetstream zstd: %w", err)
	}
	return out, nil
}

// Close releases the decoder's resources. The decompressor must not be
// used afterwards.
func (d *JetstreamDecompressor) Close() { d.dec.Close() }
