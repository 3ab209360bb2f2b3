package event

import "errors"

// Skip reasons set on Op.Skip.
const (
	SkipRecordMissing = "record_missing" // the record block is not in the frame or CAR
	SkipRecordCBOR    = "record_cbor"    // the record block is not valid atproto DAG-CBOR data
	SkipRecordJSON    = "record_json"    // the Jetstream record is not valid atproto JSON data
	SkipRecordTooBig  = "record_too_big" // the Jetstream record is past atdata's 2 MiB of JSON: its repository is resynced
	SkipTooBig        = "too_big"        // firehose commit flagged tooBig: the relay left the blocks out
	SkipBadPath       = "bad_path"       // the record path is not "collection/rkey"
	SkipBadAction     = "bad_action"     // the operation is not create, update or delete
)

// decodeRecordCBOR decodes one record block into the atproto data model:
// the same map atdata.UnmarshalCBOR returns (see decodeRecord).
func decodeRecordCBOR(b []byte) (map[string]any, error) {
	return decodeRecord(b)
}

// DecodeRecordCBOR decodes one record's DAG-CBOR into the atproto data
// model, as atdata.UnmarshalCBOR shapes it (the decoder of frames and
// CARs): for sources that receive records as bytes (Jetstream v2's
// archive and live stream, through its client).
func DecodeRecordCBOR(b []byte) (map[string]any, error) { return decodeRecord(b) }

// decodeBudget bounds the record bytes decoded from one frame or CAR. Every
// block is decoded at most once per op or MST entry that names it, and a
// hostile input can name one large block many times (a CAR of a million
// MST entries pointing at the same 1 MiB record); legitimate inputs name a
// block once, or a few times when records are identical. The budget is
// twice the input's size plus decodeBudgetSlack.
type decodeBudget struct{ left int }

const decodeBudgetSlack = 4 << 20

var errDecodeBudget = errors.New("records decoded exceed twice the input size: a block is named by too many ops")

func newDecodeBudget(inputLen int) decodeBudget {
	return decodeBudget{left: 2*inputLen + decodeBudgetSlack}
}

// spend accounts for decoding a block of n bytes.
func (d *decodeBudget) spend(n int) error {
	d.left -= n
	if d.left < 0 {
		return errDecodeBudget
	}
	return nil
}

// splitPath splits a repo path "collection/rkey". Both parts must be
// non-empty and the record key must not contain another slash.
func splitPath(p string) (collection, rkey string, ok bool) {
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			collection, rkey = p[:i], p[i+1:]
			if collection == "" || rkey == "" {
				return p, "", false
			}
			for j := 0; j < len(rkey); j++ {
				if rkey[j] == '/' {
					return p, "", false
				}
			}
			return collection, rkey, true
		}
	}
	return p, "", false
}

func parseAction(s string) Action {
	switch s {
	case "create":
		return ActionCreate
	case "update":
		return ActionUpdate
	case "delete":
		return ActionDelete
	}
	return ActionUnknown
}
