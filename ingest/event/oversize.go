package event

import "errors"

// ErrNoSeq: the first bytes of a frame too big to read do not say its
// seq and repository.
var ErrNoSeq = errors.New("firehose: the frame's seq and repository are not in its first bytes")

// OversizeFrameOp is the op that stands for a frame past MaxFrameSize, read
// from its first bytes (prefix) alone: a KindSync op of its repository at
// its seq, so that the stream goes on past it and the repository, whose
// records the frame held, is fetched whole. The header, then the body's
// keys in their order up to "seq", "repo" (or "did") and "time": DAG-CBOR
// orders a map's keys shorter first, so all of them come before a
// commit's "blocks". ErrNoSeq when the prefix does not hold them.
func OversizeFrameOp(prefix []byte) (Op, error) {
	hdrEnd, err := scanItem(prefix, 0, 0)
	if err != nil {
		return Op{}, ErrNoSeq
	}
	if op, _, err := frameHeader(prefix[:hdrEnd]); err != nil || op != 1 {
		return Op{}, ErrNoSeq
	}
	r := cborReader{b: prefix, off: hdrEnd}
	maj, n, err := r.head()
	if err != nil || maj != majMap {
		return Op{}, ErrNoSeq
	}
	o := Op{Kind: KindSync}
keys:
	for i := uint64(0); i < n && (o.Seq == 0 || o.DID == "" || o.Time.IsZero()); i++ {
		k, err := r.text()
		if err != nil {
			break
		}
		var s []byte
		switch string(k) {
		case "seq":
			o.Seq, err = r.int()
		case "repo", "did":
			s, err = r.text()
			o.DID = string(s)
		case "time":
			s, err = r.text()
			o.Time = frameTime(string(s))
		case "blocks":
			break keys // the keys above come before it
		default:
			r.off, err = skipItem(r.b, r.off)
		}
		if err != nil {
			break
		}
	}
	if o.Seq <= 0 || o.DID == "" {
		return Op{}, ErrNoSeq
	}
	return o, nil
}
