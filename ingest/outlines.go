package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/lsm"
)

// DefaultPathOutlinesMax bounds the paths outlined in the replicated
// state, each up to extract.PathBytesMax: 16 MiB at most of every node's
// memory and of each snapshot. The paths of real records number in the
// thousands; records of made-up field names could add hundreds each,
// without end. Past it a new path is named in the bucket's names tree
// (link.Codec.PathOutlinesMax): its links are kept, and cost a names
// lookup where an outlined path's cost a map's.
const DefaultPathOutlinesMax = 16384

// DefaultCollectionOutlinesMax bounds the collections outlined, each up
// to 317 bytes: 20 MiB at most. Past it a record in a new collection (any
// author can make one up) names it in the bucket instead.
const DefaultCollectionOutlinesMax = 65536

// outlineEntryBytes bounds the outlines one flush entry carries, encoded:
// a quarter of fsm.EntryBytesMax, the rest left to the entry's edit and
// cursors. Real flushes assign a few new paths and collections at most;
// records made of hundreds of made-up kilobyte-long field names assign
// megabytes, which one entry cannot carry (it would be refused, and the
// writer, started again from the same cursor, would make the same flush
// again on every node in turn: ingest stalled for good).
const outlineEntryBytes = fsm.EntryBytesMax / 4

// publishOutlines publishes, in entries of their own of at most
// outlineEntryBytes each, the first outlines of a flush while they are
// more than one entry's share, and returns the rest for the flush's own
// entry. An entry of outlines alone changes no run (an empty edit: the
// generation moves on by one); its outlines come before the tables that
// use them, as the flush's own would. If a later entry fails, the
// outlines already published stay assigned, unused until a record names
// them again, as a failed flush's own outlines would be, had it carried
// them.
func (w *Writer) publishOutlines(ctx context.Context, outlines []fsm.Outline) ([]fsm.Outline, error) {
	for {
		n, bytes := 0, 0
		for n < len(outlines) {
			b := fsm.OutlineEntryBytes(&outlines[n])
			if n > 0 && bytes+b > outlineEntryBytes {
				break
			}
			n, bytes = n+1, bytes+b
		}
		if n == len(outlines) {
			return outlines, nil // what is left fits the flush's own entry
		}
		entry := fsm.Flush{Edit: lsm.Edit{Base: w.gen}, Outlines: outlines[:n], Time: time.Now().UnixNano()}
		res, err := w.cfg.Node.Propose(ctx, fsm.TypeFlush, 0, entry)
		if err != nil {
			w.dead.Store(true)
			return nil, fmt.Errorf("publish %d outlines: %w: %w", n, err, ErrLeadershipLost)
		}
		w.gen = res.(fsm.FlushResult).Generation
		w.metrics.OutlineEntries.Inc()
		w.log.Info("outlines published in an entry of their own", "outlines", n, "bytes", bytes, "left", len(outlines)-n, "generation", w.gen)
		outlines = outlines[n:]
	}
}
