package simnet

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"sort"

	"github.com/bluesky-social/indigo/atproto/atdata"
)

// The PLC directory: one operation log for every did:plc, with sequence
// numbers as plc.directory's /export gives them (from 1, no gaps).
// Operations are well-formed but their keys and signatures are random
// bytes: nothing verifies them. A did:plc is derived from its genesis
// operation as the PLC method prescribes (base32 of the SHA-256 of the
// signed operation's DAG-CBOR, first 24 characters).
//
// Operations name a PDS by a logical endpoint (https://pds<i>.simnet.test)
// so that DIDs and CIDs do not depend on the ports the servers get; the
// servers substitute their own URLs when they serve operations and DID
// documents (the operation CIDs are then those of the logical form).

type plcOp struct {
	seq       int64
	did       string
	cid       dagCID
	createdAt int64 // µs
	prev      *dagCID
	handle    string
	pds       int
	sigKey    string
	rotKey    string
	sig       string
}

// LogicalPDSEndpoint is the endpoint of PDS i in PLC operations and the
// World's DID documents.
func LogicalPDSEndpoint(i int) string { return "https://" + pdsHost(i) }

type plcService struct {
	Type     string `json:"type"`
	Endpoint string `json:"endpoint"`
}

type plcOperation struct {
	Sig                 string                `json:"sig"`
	Prev                *string               `json:"prev"`
	Type                string                `json:"type"`
	Services            map[string]plcService `json:"services"`
	AlsoKnownAs         []string              `json:"alsoKnownAs"`
	RotationKeys        []string              `json:"rotationKeys"`
	VerificationMethods map[string]string     `json:"verificationMethods"`
}

type plcLine struct {
	DID       string       `json:"did"`
	Operation plcOperation `json:"operation"`
	CID       string       `json:"cid"`
	Nullified bool         `json:"nullified"`
	CreatedAt string       `json:"createdAt"`
	Seq       int64        `json:"seq"`
	Type      string       `json:"type"`
}

func (op *plcOp) operation(endpoint string) plcOperation {
	o := plcOperation{
		Sig:                 op.sig,
		Type:                "plc_operation",
		Services:            map[string]plcService{"atproto_pds": {Type: "AtprotoPersonalDataServer", Endpoint: endpoint}},
		AlsoKnownAs:         []string{"at://" + op.handle},
		RotationKeys:        []string{op.rotKey},
		VerificationMethods: map[string]string{"atproto": op.sigKey},
	}
	if op.prev != nil {
		p := op.prev.String()
		o.Prev = &p
	}
	return o
}

// cbor encodes the signed operation (logical endpoint) as DAG-CBOR.
func (op *plcOp) cbor() []byte {
	o := op.operation(LogicalPDSEndpoint(op.pds))
	var prev any
	if o.Prev != nil {
		prev = *o.Prev
	}
	m := map[string]any{
		"sig":  o.Sig,
		"prev": prev,
		"type": o.Type,
		"services": map[string]any{"atproto_pds": map[string]any{
			"type": "AtprotoPersonalDataServer", "endpoint": o.Services["atproto_pds"].Endpoint}},
		"alsoKnownAs":         []any{o.AlsoKnownAs[0]},
		"rotationKeys":        []any{op.rotKey},
		"verificationMethods": map[string]any{"atproto": op.sigKey},
	}
	b, err := atdata.MarshalCBOR(m)
	if err != nil {
		panic("simnet: PLC operation does not encode: " + err.Error())
	}
	return b
}

// newPLCOp logs a PLC operation for a's current handle and PDS: the
// genesis operation when prev is nil (it sets a.did), else an update.
func (w *World) newPLCOp(a *account, now int64, prev *dagCID) *plcOp {
	sig := make([]byte, 64)
	for i := range sig {
		sig[i] = byte(w.rng.Uint32())
	}
	op := &plcOp{
		seq:       int64(len(w.plc)) + 1,
		createdAt: now,
		prev:      prev,
		handle:    a.handle,
		pds:       a.pds,
		sigKey:    a.sigKey,
		rotKey:    a.rotKey,
		sig:       base64.RawURLEncoding.EncodeToString(sig),
	}
	op.cid = sumCID(op.cbor())
	if prev == nil {
		a.did = "did:plc:" + b32.EncodeToString(op.cid[:])[:24]
	}
	op.did = a.did
	a.plcHead = op.cid
	w.plc = append(w.plc, op)
	return op
}

// plcExport renders up to count operations with seq > after as JSON lines,
// naming PDS i by endpoint(i).
func (w *World) plcExport(after int64, count int, endpoint func(int) string) []byte {
	w.mu.RLock()
	ops := w.plc[:len(w.plc):len(w.plc)]
	w.mu.RUnlock()
	i := sort.Search(len(ops), func(i int) bool { return ops[i].seq > after })
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for ; i < len(ops) && count > 0; i, count = i+1, count-1 {
		op := ops[i]
		line := plcLine{
			DID:       op.did,
			Operation: op.operation(endpoint(op.pds)),
			CID:       op.cid.String(),
			CreatedAt: isoTime(op.createdAt),
			Seq:       op.seq,
			Type:      "sequenced_op",
		}
		if err := enc.Encode(&line); err != nil {
			panic("simnet: PLC export: " + err.Error())
		}
	}
	return buf.Bytes()
}

// PLCExport returns up to count PLC operations with sequence number above
// after, as plc.directory's GET /export?after=&count= gives them: JSON
// lines {did, operation, cid, nullified, createdAt, seq, type}, with the
// logical PDS endpoints.
func (w *World) PLCExport(after int64, count int) []byte {
	return w.plcExport(after, count, LogicalPDSEndpoint)
}

// LastPLCSeq returns the sequence number of the latest PLC operation.
func (w *World) LastPLCSeq() int64 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return int64(len(w.plc))
}

// DIDDocument is a DID document as the PLC directory (or a did:web host)
// serves it.
type DIDDocument struct {
	Context            []string             `json:"@context"`
	ID                 string               `json:"id"`
	AlsoKnownAs        []string             `json:"alsoKnownAs"`
	VerificationMethod []VerificationMethod `json:"verificationMethod"`
	Service            []Service            `json:"service"`
}

// VerificationMethod is a DID document's key.
type VerificationMethod struct {
	ID                 string `json:"id"`
	Type               string `json:"type"`
	Controller         string `json:"controller"`
	PublicKeyMultibase string `json:"publicKeyMultibase"`
}

// Service is a DID document's service entry.
type Service struct {
	ID              string `json:"id"`
	Type            string `json:"type"`
	ServiceEndpoint string `json:"serviceEndpoint"`
}

// PDSEndpoint returns the AtprotoPersonalDataServer endpoint of the
// document, or "".
func (d *DIDDocument) PDSEndpoint() string {
	for _, s := range d.Service {
		if s.ID == "#atproto_pds" && s.Type == "AtprotoPersonalDataServer" {
			return s.ServiceEndpoint
		}
	}
	return ""
}

func (w *World) didDocument(did string, endpoint func(int) string) (DIDDocument, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	a, ok := w.byDID[did]
	if !ok {
		return DIDDocument{}, false
	}
	return DIDDocument{
		Context: []string{"https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1",
			"https://w3id.org/security/suites/secp256k1-2019/v1"},
		ID:          a.did,
		AlsoKnownAs: []string{"at://" + a.handle},
		VerificationMethod: []VerificationMethod{{ID: a.did + "#atproto", Type: "Multikey", Controller: a.did,
			PublicKeyMultibase: a.sigKey[len("did:key:"):]}},
		Service: []Service{{ID: "#atproto_pds", Type: "AtprotoPersonalDataServer", ServiceEndpoint: endpoint(a.pds)}},
	}, true
}

// DIDDocument returns the current DID document of did (did:plc or
// did:web) with the logical PDS endpoint; Net.DIDDocument gives the
// served one. This is the resolver hook for did:web, whose documents
// cannot live at https://<host>/.well-known/did.json in a test.
func (w *World) DIDDocument(did string) (DIDDocument, bool) {
	return w.didDocument(did, LogicalPDSEndpoint)
}
