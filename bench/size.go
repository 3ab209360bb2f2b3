package bench

import (
	"context"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
)

// liveLinks is the number of live links at the end of the workload.
func (b *bench) liveLinks() int {
	if b.st != nil {
		return b.st.LiveLinks()
	}
	return b.wl.LiveLinks()
}

// size sums the live tables of the manifest.
func (b *bench) size(ctx context.Context, store objstore.Store) error {
	res := b.res
	m := b.db.View().Manifest
	res.Runs = len(m.Runs)
	var linkBytes, revBytes, linkMeta, revMeta, filterBytes, fenceBytes uint64
	var rawBytes uint64
	for _, r := range m.Runs {
		for _, t := range r.Tables {
			res.Tables++
			res.DataBytes += t.DataBytes
			res.MetaBytes += t.MetaBytes
			switch r.Tree {
			case lsm.TreeLinks:
				res.LinkTables++
				linkBytes += t.DataBytes + t.MetaBytes
				linkMeta += t.MetaBytes
				rawBytes += t.Records * link.BacklinkSize
			case lsm.TreeRevocations:
				res.RevTables++
				revBytes += t.DataBytes + t.MetaBytes
				revMeta += t.MetaBytes
				rawBytes += t.Records * link.RevocationSize
			}
			// Where the meta bytes go: the filter and the fences.
			mb, err := store.Get(ctx, "tables/"+string(r.Tree)+"/"+t.ID+".meta")
			if err != nil {
				return err
			}
			tm, err := lsm.DecodeMeta(mb)
			if err != nil {
				return err
			}
			res.Frames += len(tm.Frames)
			filterBytes += uint64(tm.FilterBytes())
			fenceBytes += uint64(len(tm.Frames) * (17 + tm.Format.Width))
		}
	}
	live := float64(b.liveLinks())
	res.BytesPerLink = float64(res.DataBytes+res.MetaBytes) / live
	res.MetaBytesPerLink = float64(res.MetaBytes) / live
	res.DataBytesPerLink = float64(res.DataBytes) / live
	res.LinkTreeBytesPerLink = float64(linkBytes) / live
	res.RevTreeBytesPerLink = float64(revBytes) / live
	res.LinkTreeMetaPerLink = float64(linkMeta) / live
	res.RevTreeMetaPerLink = float64(revMeta) / live
	res.FilterBytesPerLink = float64(filterBytes) / live
	res.FenceBytesPerLink = float64(fenceBytes) / live
	res.RawBytesPerLink = float64(rawBytes) / live
	res.CompressionVsRawRatio = float64(rawBytes) / float64(res.DataBytes+res.MetaBytes)
	err := store.List(ctx, "", func(_ string, n int64) error {
		res.StoreObjects++
		res.StoreBytes += n
		return nil
	})
	res.BucketBytesPerLink = float64(res.StoreBytes) / live
	// The write phase's PUTs over the tables it left: with --compact-full,
	// those before the full compaction (whose own PUTs are counted apart),
	// not the merged index's, which would count the same writes as more.
	written := uint64(res.DataBytes + res.MetaBytes)
	if res.TableBytesBeforeFull > 0 {
		written = res.TableBytesBeforeFull
	}
	if written > 0 {
		res.WriteAmplification = float64(res.StorePutBytes) / float64(written)
	}
	res.ManifestBytes = b.manifestBytes()
	b.logf("size: %.2f bytes/link (%.2f data, %.2f meta) in %d tables of %d runs", res.BytesPerLink, res.DataBytesPerLink, res.MetaBytesPerLink, res.Tables, res.Runs)
	return err
}
