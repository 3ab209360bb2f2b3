package lsm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/eddy-backlinks/eddy/link"
)

// realKeyBacklinks returns backlinks whose sources are the real records
// of testdata's repositories (their DIDs numbered in order of first
// appearance, their collections numbered, their TID record keys as they
// are), spread over a few targets and stamped as a backfill stamps them
// (one rev per account); and the number of accounts with two or more.
func realKeyBacklinks(t *testing.T) ([]byte, int) {
	t.Helper()
	f, err := os.Open("../testdata/derived/records_from_cars.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dids, cols := map[string]uint64{}, map[string]uint64{}
	perDID := map[uint64]int{}
	w := link.BacklinkSize
	var recs []byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var r struct{ DID, Collection, RKey string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		tid, ok := link.TIDValue(r.RKey)
		if !ok {
			continue
		}
		if _, ok := dids[r.DID]; !ok {
			dids[r.DID] = uint64(len(dids) + 1)
		}
		if _, ok := cols[r.Collection]; !ok {
			cols[r.Collection] = link.CollectionFirst + uint64(len(cols))
		}
		did := dids[r.DID]
		perDID[did]++
		l := link.Backlink{
			Target:    link.RecordID{RKey: 1 + tid%5, Collection: link.CollectionFirst, DID: 7},
			Source:    link.RecordID{RKey: tid, Collection: cols[r.Collection], DID: did},
			Location:  1,
			SourceRev: 1000 + did,
		}
		recs = append(recs, make([]byte, w)...)
		l.Put(recs[len(recs)-w:])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	SortRecords(recs, w)
	recs = synthDedup(recs, w)
	accounts := 0
	for _, n := range perDID {
		if n >= 2 {
			accounts++
		}
	}
	return recs, accounts
}

// Real TIDs' clock ids belong to the PDS process that wrote them, not to
// the account: the repositories in testdata carry 11 to 28 of them in an
// account. Version 5 keeps an account to its DID and the clock id in a
// column, so its dictionary has an entry per account (version 4: one per
// pair) and the same records take fewer bytes; both versions still round
// trip, and the current binary reads version 4.
func TestClockColumnOnRealKeys(t *testing.T) {
	recs, accounts := realKeyBacklinks(t)
	w := BacklinkFormat.Width
	if len(recs)/w < 400 || accounts < 5 {
		t.Fatalf("%d records of %d accounts: testdata changed?", len(recs)/w, accounts)
	}
	size := map[int]int{}
	entries := map[int]int{}
	for _, v := range []int{4, 5} {
		data, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{version: v, frameMax: 100})
		if err != nil {
			t.Fatal(err)
		}
		m, err := DecodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		if m.layout.clockCol != (v >= 5) {
			t.Fatalf("version %d: clock column %v", v, m.layout.clockCol)
		}
		var got, buf []byte
		for i := range m.NumFrames() {
			off, n := m.ByteRange(i, i)
			if buf, err = m.DecodeFrame(i, data[off:off+n], buf); err != nil {
				t.Fatal(err)
			}
			got = append(got, buf...)
		}
		if !bytes.Equal(got, recs) {
			t.Fatalf("version %d does not round trip", v)
		}
		size[v], entries[v] = len(data)+len(meta), m.dict.len()
	}
	t.Logf("%d records of %d accounts: version 4 %d bytes, %d dictionary entries; version 5 %d bytes, %d entries",
		len(recs)/w, accounts, size[4], entries[4], size[5], entries[5])
	if entries[5] != accounts {
		t.Fatalf("version 5 dictionary: %d entries for %d accounts", entries[5], accounts)
	}
	if entries[4] < 3*accounts {
		t.Fatalf("version 4 dictionary: %d entries for %d accounts (pairs with clock ids)", entries[4], accounts)
	}
	if size[5] >= size[4] {
		t.Fatalf("version 5 takes %d bytes, version 4 %d", size[5], size[4])
	}
}

// Where an account's records share one clock id (a live tail: a host
// keeps its clock id for weeks), version 5 predicts each record's from
// its account's dictionary entry, and takes about what version 4 took.
func TestClockColumnOneClockAnAccount(t *testing.T) {
	recs := synthBackfillBacklinks(41, 60000) // a clock id per author
	size := map[int]int{}
	for _, v := range []int{4, 5} {
		data, meta, err := BuildTable(BacklinkFormat, recs, TableOptions{version: v})
		if err != nil {
			t.Fatal(err)
		}
		size[v] = len(data) + len(meta)
	}
	t.Logf("%d records: version 4 %d bytes, version 5 %d", len(recs)/BacklinkFormat.Width, size[4], size[5])
	if float64(size[5]) > 1.01*float64(size[4]) {
		t.Fatalf("version 5 takes %d bytes, version 4 %d", size[5], size[4])
	}
}
