// Package event turns the three forms in which the atproto network delivers
// data (Jetstream v1 JSON events, relay firehose frames, repository CAR
// files) into one operation type, Op, that the rest of Eddy consumes.
//
// Decoders never panic on bad input: a malformed frame or event is an
// error for that frame; a record inside a good frame that cannot be decoded
// is delivered as an Op with Skip set (and Record nil), so the caller can
// count it and move on without losing the rest of the commit.
//
// Entry points: DecodeJetstream (one JSON event; JetstreamDecompressor for
// compress=true), DecodeFrame and ReadFrames (relay firehose), ReadCAR and
// DecodeCAR (repository exports). Records from CBOR are decoded by this
// package's own decoder, which yields exactly atdata.UnmarshalCBOR's maps
// about three times faster (recorddec.go); records from JSON by
// atdata.UnmarshalJSON.
package event

import "time"

// Kind says what an Op describes.
type Kind uint8

const (
	KindUnknown  Kind = iota
	KindCommit        // one record operation of a repository commit
	KindIdentity      // a DID's handle or document changed
	KindAccount       // an account's hosting status changed
	// KindSync says a repository is now at Rev without listing the ops
	// that led there (firehose #sync): a consumer whose copy of the
	// repository is older must fetch it again. Only DID, Seq and Rev are set.
	KindSync
	// KindRepoReset says the records of a repository are replaced by the
	// ones its source sends right after it (Jetstream v2's #sync, followed
	// by the repository's records): every record it had before goes. Only
	// DID, Seq and Rev are set.
	KindRepoReset
)

func (k Kind) String() string {
	switch k {
	case KindCommit:
		return "commit"
	case KindIdentity:
		return "identity"
	case KindAccount:
		return "account"
	case KindSync:
		return "sync"
	case KindRepoReset:
		return "repo_reset"
	}
	return "unknown"
}

// Action is the record operation of a commit Op.
type Action uint8

const (
	ActionUnknown Action = iota
	ActionCreate
	ActionUpdate
	ActionDelete
)

func (a Action) String() string {
	switch a {
	case ActionCreate:
		return "create"
	case ActionUpdate:
		return "update"
	case ActionDelete:
		return "delete"
	}
	return "unknown"
}

// Op is one operation from any input form.
type Op struct {
	Kind Kind
	DID  string
	// Seq is the stream position that delivered the op: the relay sequence
	// number for firehose frames, time_us for Jetstream events, 0 for CARs.
	Seq int64
	// Rev is the repository revision (a TID) of the commit, when known.
	Rev string
	// Time is when the network emitted the event, by the clock of the
	// server that sent it (a relay frame's "time", Jetstream's time_us),
	// in UTC; zero when unknown (a CAR, a frame without a valid time).
	Time time.Time

	// Commit ops.
	Action     Action
	Collection string
	RKey       string
	CID        string // record CID as a string; empty for deletes
	// Record is the record in the atproto data model, exactly as
	// atproto/atdata's UnmarshalJSON/UnmarshalCBOR shape it (CIDLink,
	// Bytes, Blob values); nil for deletes and skipped records.
	Record map[string]any
	// Skip, when not empty, says why the record of this commit op could not
	// be decoded (for example "record_missing", "record_cbor"). The op
	// still carries DID, Collection, RKey and Action.
	Skip string

	// Account ops.
	Active bool
	Status string // "deleted", "takendown", "suspended", "deactivated", ... when not Active
	// RelaySeq is the relay's sequence number of an identity or account
	// event that Jetstream passes on (0 when absent); for the firehose it
	// is Seq itself and is not set.
	RelaySeq int64

	// Identity ops.
	Handle string

	// Cursor is the event's sequence number on a Jetstream v2 server (its
	// v1 events' "cursor", its v2 events' "seq"): per server instance,
	// strictly increasing; 0 from a Jetstream v1 server and other inputs.
	Cursor int64
}

// URI is the at-uri of a commit op's record.
func (o *Op) URI() string {
	return "at://" + o.DID + "/" + o.Collection + "/" + o.RKey
}

// AccountGone reports whether an account event that is not active, of this
// status, says the account's repository is no longer served: deleted,
// taken down, suspended or deactivated. A relay also marks accounts
// inactive for its own reasons ("desynchronized": it lost the repository's
// chain; "throttled", "host-throttled": their host is over its limits),
// and sends some without a status: the account is still there, so its
// links stay.
func AccountGone(status string) bool {
	switch status {
	case "deleted", "takendown", "suspended", "deactivated":
		return true
	}
	return false
}
