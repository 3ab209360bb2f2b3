package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
)

// readMeta decodes a table's meta from the store, given the dictionary of
// the table of its run that holds it, if another does.
func readMeta(ctx context.Context, store objstore.Store, tree lsm.Tree, id string) (*lsm.TableMeta, error) {
	mb, err := store.Get(ctx, "tables/"+string(tree)+"/"+id+".meta")
	if err != nil {
		return nil, err
	}
	tm, err := lsm.DecodeMeta(mb)
	if err != nil {
		return nil, err
	}
	if owner := tm.DictTable(); owner != "" {
		mb, err := store.Get(ctx, "tables/"+string(tree)+"/"+owner+".meta")
		if err != nil {
			return nil, err
		}
		om, err := lsm.DecodeMeta(mb) // not resolved: it must hold the dictionary
		if err != nil {
			return nil, err
		}
		if err := tm.UseDictOf(om); err != nil {
			return nil, err
		}
	}
	return tm, nil
}

// readTable returns every record of a table.
func readTable(ctx context.Context, store objstore.Store, tree lsm.Tree, id string) ([]byte, error) {
	tm, err := readMeta(ctx, store, tree, id)
	if err != nil {
		return nil, err
	}
	data, err := store.Get(ctx, "tables/"+string(tree)+"/"+id+".data")
	if err != nil {
		return nil, err
	}
	var recs, frame []byte
	for i := range tm.Frames {
		off, n := tm.ByteRange(i, i)
		if frame, err = tm.DecodeFrame(i, data[off:off+n], frame[:0]); err != nil {
			return nil, err
		}
		recs = append(recs, frame...)
	}
	return recs, nil
}

// breakdown rebuilds each table of the links tree with one backlink field
// blanked at a time, and attributes the bytes saved to the field.
func (b *bench) breakdown(ctx context.Context, store objstore.Store) error {
	fields := []struct {
		name   string
		lo, hi int
	}{
		{"source_rkey", 24, 32}, {"source_collection", 32, 40}, {"source_did", 40, 48},
		{"location", 48, 56}, {"source_rev", 56, 64}, {"target", 24, 64},
	}
	saved := make([]int64, len(fields)) // bytes saved by blanking the field ("target": bytes left)
	var base int64
	const w = link.BacklinkSize
	for _, r := range b.db.View().Manifest.RunsOf(lsm.TreeLinks) {
		for _, t := range r.Tables {
			recs, err := readTable(ctx, store, lsm.TreeLinks, t.ID)
			if err != nil {
				return err
			}
			data, _, err := lsm.BuildTable(lsm.BacklinkFormat, recs, lsm.TableOptions{})
			if err != nil {
				return err
			}
			base += int64(len(data))
			for fi, f := range fields {
				cp := slices.Clone(recs)
				for o := 0; o < len(cp); o += w {
					clear(cp[o+f.lo : o+f.hi])
				}
				if f.name == "target" {
					// Every source field blanked: number the links of a
					// target 0, 1, 2... so records stay distinct.
					var n uint64
					for o := 0; o < len(cp); o += w {
						if o > 0 && !bytes.Equal(cp[o:o+24], cp[o-w:o-w+24]) {
							n = 0
						}
						binary.BigEndian.PutUint64(cp[o+56:o+64], n)
						n++
					}
				}
				lsm.SortRecords(cp, w)
				// Drop the (rare) records that became identical.
				out := cp[:0]
				for o := 0; o < len(cp); o += w {
					if len(out) == 0 || !bytes.Equal(out[len(out)-w:], cp[o:o+w]) {
						out = append(out, cp[o:o+w]...)
					}
				}
				d, _, err := lsm.BuildTable(lsm.BacklinkFormat, out, lsm.TableOptions{})
				if err != nil {
					return err
				}
				if f.name == "target" {
					saved[fi] += int64(len(d)) // what is left
				} else {
					saved[fi] += int64(len(data)) - int64(len(d))
				}
			}
		}
	}
	live := float64(b.wl.LiveLinks())
	b.res.LinkDataBreakdown = map[string]float64{"total": float64(base) / live}
	for i, f := range fields {
		b.res.LinkDataBreakdown[f.name] = float64(saved[i]) / live
	}
	b.logf("breakdown of the links data (bytes per live link): %v", b.res.LinkDataBreakdown)
	return nil
}
