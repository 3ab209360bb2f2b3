package lsm

import (
	"bytes"
	"context"
	"encoding/hex"
	"slices"
	"testing"
)

// TestMeasureWritePath measures, on a bench run's index (its temporary
// directory, kept with bench lsm --keep or copied while it runs), what
// the write path's costs per record are made of where a profile alone
// cannot say: each run's distinct prefixes a record (a table's filter
// keys), the CPU of BuildTable re-encoding the first tables of the run
// of merged columns with the largest shared dictionary (with it: the
// encoding, the ranks, the filter and the self-check, as a merge into
// columns builds them), and the CPU of sorting a flush's records in the
// order a backfill's memtable receives them (by source repository).
// Reproduce:
//
//	go test ./lsm -run TestMeasureWritePath -v -lsm.measure-dir DIR
func TestMeasureWritePath(t *testing.T) {
	ctx := context.Background()
	db, store := openMeasuredIndex(t)
	v := db.View()
	load := func(vt *viewTable) *TableMeta {
		m, err := vt.load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	records := func(vt *viewTable, m *TableMeta) []byte {
		data, err := store.Get(ctx, dataKey(TreeLinks, vt.ref.ID))
		if err != nil {
			t.Fatal(err)
		}
		var recs, buf []byte
		for i := range m.NumFrames() {
			off, l := m.ByteRange(i, i)
			if buf, err = m.DecodeFrame(i, data[off:off+l], buf); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, buf...)
		}
		return recs
	}
	var columns, flush *viewRun
	for _, vr := range v.trees[TreeLinks] {
		var n, pre uint64
		for _, vt := range vr.tables {
			if vt != nil {
				m := load(vt)
				n, pre = n+m.Records, pre+m.Prefixes
			}
		}
		m := load(vr.tables[0])
		t.Logf("run %s (%v, %v): %d tables, %d records, %.2f distinct prefixes a record", vr.run.ID[:8], vr.run.Kind, m.transform, len(vr.tables), n, float64(pre)/float64(n))
		switch {
		case vr.run.Kind == RunDelta && flush == nil:
			flush = vr
		case m.transform == transformColumns && (columns == nil || m.dict.len() > load(columns.tables[0]).dict.len()):
			columns = vr
		}
	}
	if columns != nil {
		owner := load(columns.tables[0])
		ownerID, err := hex.DecodeString(columns.tables[0].ref.ID)
		if err != nil {
			t.Fatal(err)
		}
		// The dictionary as a merge counts it (its revs and clock ids in
		// arrays), not as the mapped meta packs it.
		od := owner.dict
		d := &accountDict{dids: make([]uint64, od.len()), clocks: make([]uint16, od.len()), revs: make([]uint64, od.len())}
		for i := range od.len() {
			did, clock := od.account(i)
			d.dids[i], d.clocks[i], d.revs[i] = did, uint16(clock), od.rev(i)
		}
		var n int
		var cpu float64
		for _, vt := range columns.tables[:min(4, len(columns.tables))] {
			m := load(vt)
			recs := records(vt, m)
			c0 := processCPU()
			if _, _, err := BuildTable(BacklinkFormat, recs, TableOptions{ShardBits: m.ShardBits, Shard: m.Shard, sharedDict: d, dictOwner: ownerID}); err != nil {
				t.Fatal(err)
			}
			cpu += float64((processCPU() - c0).Nanoseconds())
			n += len(recs) / 64
		}
		t.Logf("BuildTable, run %s (dictionary of %d accounts): %d records, %.0f ns of CPU a record", columns.run.ID[:8], d.len(), n, cpu/float64(n))
	}
	if flush != nil {
		recs := records(flush.tables[0], load(flush.tables[0]))
		n := len(recs) / 64
		// A backfill's arrival order: repository after repository (the
		// source DID, bytes 40-48), each in record order.
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		src := func(i int) []byte { return recs[i*64+24 : i*64+48] }
		slices.SortFunc(order, func(a, b int) int {
			if c := bytes.Compare(src(a)[16:], src(b)[16:]); c != 0 {
				return c
			}
			return bytes.Compare(src(a), src(b))
		})
		in := make([]byte, len(recs))
		for k, i := range order {
			copy(in[k*64:], recs[i*64:i*64+64])
		}
		buf := make([]byte, len(in))
		var best float64
		for round := range 5 {
			copy(buf, in)
			c0 := processCPU()
			SortRecords(buf, 64)
			c := float64((processCPU() - c0).Nanoseconds()) / float64(n)
			if !bytes.Equal(buf, recs) {
				t.Fatal("the flush's records sorted into another order than its table's")
			}
			if round == 0 || c < best {
				best = c
			}
		}
		t.Logf("SortRecords, flush %s: %d records in arrival order, %.0f ns of CPU a record (the best of 5)", flush.run.ID[:8], n, best)
	}
}
