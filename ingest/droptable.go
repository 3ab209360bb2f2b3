package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/lsm"
)

// Dropping a damaged table: an operator's request (eddy-ctl tables drop)
// that tables whose objects the bucket lost or damaged, with no copy to
// restore them from, leave the index. Until then every query of a target
// in such a table fails, and so does every merge that takes its run (a
// merge reads its inputs whole): the runs behind it wait, and a full
// compaction never ends. The table's records are lost from answers; a
// crawl (eddy-ctl backfill restart) brings a backfill's links back.
//
// The request is a replicated setting per table (dropTableKey + the tree
// + ":" + the table's ID, its value the generation it was asked at), so
// whichever node leads carries it out, and every node's status shows it.
// The leader's compaction loop rewrites the run that holds the table
// without it: the run's other tables merged into a new run as any merge
// of that one run would write them (read through a view of the manifest
// without the dropped tables, so a table whose metadata is lost too does
// not stop it), published by the next flush like any merge, which makes
// the old run's tables garbage; a run whose every table is dropped is
// removed with no new run. Such a merge takes the big lane before the
// tree's full compaction, and ordinary merges leave the run alone while
// the request is pending. A request whose table is no longer in the
// manifest (dropped, or merged away after its object was restored) is
// done, and its setting deleted, at the loop's next look: so a leader lost
// between publishing and deleting leaves nothing to do again. A drop
// merge that fails (another table of the run is damaged too, or the
// dictionary the run's tables share is lost with the table that held it:
// the log names the table) is tried again after fullRetryMin, then twice
// as long each time up to fullRetryMax, while the request stays; naming
// the run instead drops every table of it.
const dropTableKey = "drop_table:"

// dropKey is the setting that asks for table id of tree to be dropped.
func dropKey(tree lsm.Tree, id string) string {
	return dropTableKey + string(tree) + ":" + id
}

// ErrNotInIndex: a drop request named a table or run the manifest does
// not hold.
var ErrNotInIndex = errors.New("not in the index")

// DroppedTable is a table a drop request names, for the operator.
type DroppedTable struct {
	Tree    lsm.Tree `json:"tree"`
	Table   string   `json:"table"`
	Run     string   `json:"run"`
	Records uint64   `json:"records"`
	Bytes   uint64   `json:"bytes"`
}

// dropTargets returns the tables of tree that ids name in m (a table's
// ID, or a run's: every table of the run), in the manifest's order.
func dropTargets(m *lsm.Manifest, tree lsm.Tree, ids []string) ([]DroppedTable, error) {
	if _, err := lsm.FormatOf(tree); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotInIndex, err)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var out []DroppedTable
	for _, run := range m.RunsOf(tree) {
		whole := want[run.ID]
		delete(want, run.ID)
		for _, t := range run.Tables {
			if whole || want[t.ID] {
				out = append(out, DroppedTable{Tree: tree, Table: t.ID, Run: run.ID, Records: t.Records, Bytes: t.DataBytes + t.MetaBytes})
			}
			delete(want, t.ID)
		}
	}
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for id := range want {
			missing = append(missing, id)
		}
		slices.Sort(missing)
		return nil, fmt.Errorf("%w: no table or run of tree %s at generation %d is named %s", ErrNotInIndex, tree, m.Generation, strings.Join(missing, ", "))
	}
	return out, nil
}

// RequestDropTables asks (on the leader: the settings are proposed
// through Raft) that the tables of tree named by ids (tables or runs) be
// dropped from the index, and returns them.
func RequestDropTables(ctx context.Context, node *cluster.Node, tree lsm.Tree, ids []string) ([]DroppedTable, error) {
	m := node.FSM.Manifest()
	tables, err := dropTargets(m, tree, ids)
	if err != nil {
		return nil, err
	}
	gen := strconv.FormatUint(m.Generation, 10)
	for _, t := range tables {
		if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: dropKey(tree, t.Table), Value: gen}); err != nil {
			return nil, fmt.Errorf("drop table %s: %w", t.Table, err)
		}
	}
	return tables, nil
}

// CancelDropTables withdraws the drop requests of tree's tables named by
// ids (every pending one of the tree if ids is empty; on the leader): a
// drop merge already running is published. It returns the requests it
// withdrew.
func CancelDropTables(ctx context.Context, node *cluster.Node, tree lsm.Tree, ids []string) ([]string, error) {
	var out []string
	for id := range pendingDrops(node.FSM, tree) {
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: dropKey(tree, id)}); err != nil {
			return out, fmt.Errorf("withdraw the drop of %s: %w", id, err)
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// pendingDrops returns the tables of tree a drop request asks for, each
// with the request's value.
func pendingDrops(s *fsm.State, tree lsm.Tree) map[string]string {
	prefix := dropTableKey + string(tree) + ":"
	out := map[string]string{}
	for k, v := range s.SettingsWithPrefix(prefix) {
		out[strings.TrimPrefix(k, prefix)] = v
	}
	return out
}

// DropsPending returns, by tree, the tables drop requests ask for that
// are not dropped yet (nil: none), as s says.
func DropsPending(s *fsm.State) map[lsm.Tree][]string {
	var out map[lsm.Tree][]string
	for _, t := range lsm.Trees {
		d := pendingDrops(s, t)
		if len(d) == 0 {
			continue
		}
		if out == nil {
			out = map[lsm.Tree][]string{}
		}
		for id := range d {
			out[t] = append(out[t], id)
		}
		slices.Sort(out[t])
	}
	return out
}

// AdminDropTables is the admin API's DropTables hook of a node
// (cluster.Admin): it asks for tables to be dropped, or withdraws such
// requests, and says what is pending.
func AdminDropTables(node *cluster.Node) func(context.Context, cluster.DropTablesRequest) (map[string]any, error) {
	return func(ctx context.Context, req cluster.DropTablesRequest) (map[string]any, error) {
		tree := lsm.Tree(req.Tree)
		if req.Cancel {
			ids, err := CancelDropTables(ctx, node, tree, req.Tables)
			if err != nil {
				return nil, err
			}
			return map[string]any{"cancelled": ids, "pending": DropsPending(node.FSM), "leader": node.ID()}, nil
		}
		tables, err := RequestDropTables(ctx, node, tree, req.Tables)
		if err != nil {
			if errors.Is(err, ErrNotInIndex) {
				return nil, fmt.Errorf("%w: %v", cluster.ErrNotFound, err)
			}
			return nil, err
		}
		return map[string]any{"tables": tables, "pending": DropsPending(node.FSM), "leader": node.ID()}, nil
	}
}

// dropMerge is a merge that drops tables from their run: the run's other
// tables merged into a new run (none if it keeps none).
type dropMerge struct {
	tree    lsm.Tree
	run     string
	dropped []lsm.TableRef
}

// dropHold holds back a tree's drop merges after one failed.
type dropHold struct {
	until time.Time
	wait  time.Duration
}

// withoutTables returns m with the tables of drop left out of their runs
// (a run left with none left out): the view a drop merge reads through,
// which never opens a dropped table.
func withoutTables(m *lsm.Manifest, drop map[string]bool) *lsm.Manifest {
	out := *m
	out.Runs = nil
	for _, run := range m.Runs {
		run.Tables = slices.DeleteFunc(slices.Clone(run.Tables), func(t lsm.TableRef) bool { return drop[t.ID] })
		if len(run.Tables) > 0 {
			out.Runs = append(out.Runs, run)
		}
	}
	return &out
}

// startDrop carries out tree's drop requests, if it has any: deletes
// those whose tables are no longer in m (done), and starts in the idle big
// lane the merge of the first run that holds tables to drop and that no
// other merge holds (unless a drop of the tree failed lately: held). It
// reports whether the tree still has tables to drop, so that the caller
// starts no full compaction of it.
func (r *Runner) startDrop(ctx context.Context, w *Writer, m *lsm.Manifest, lanes *[2]lane, reserved func(string) bool, tree lsm.Tree, held bool, results chan<- mergeResult, merges *sync.WaitGroup) bool {
	drops := pendingDrops(r.Config.Node.FSM, tree)
	if len(drops) == 0 {
		return false
	}
	present := map[string]bool{}
	var first *lsm.Run
	runs := m.RunsOf(tree)
	for i := range runs {
		for _, t := range runs[i].Tables {
			if _, ok := drops[t.ID]; ok {
				present[t.ID] = true
				if first == nil && !reserved(runs[i].ID) {
					first = &runs[i]
				}
			}
		}
	}
	for id := range drops {
		if present[id] {
			continue
		}
		if _, err := r.Config.Node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: dropKey(tree, id)}); err != nil {
			w.log.Warn("drop table: could not mark the request done; trying again", "tree", tree, "table", id, "error", err)
		}
	}
	if len(present) == 0 {
		return false
	}
	if first == nil || held || lanes[laneBig].inputs != nil {
		return true // a merge holding the run ends first
	}
	d := &dropMerge{tree: tree, run: first.ID}
	drop := map[string]bool{}
	keep := *first
	keep.Tables = nil
	for _, t := range first.Tables {
		if present[t.ID] {
			d.dropped = append(d.dropped, t)
			drop[t.ID] = true
		} else {
			keep.Tables = append(keep.Tables, t)
		}
	}
	r.startMerge(ctx, w, withoutTables(m, drop), laneBig, &lanes[laneBig], tree, []lsm.Run{keep}, nil, results, merges)
	lanes[laneBig].drop = d
	w.log.Warn("dropping tables from the index at an operator's request: the run's other tables are merged into a new run", "tree", tree, "run", first.ID, "tables", len(d.dropped), "records", droppedRecords(d.dropped), "kept_tables", len(keep.Tables))
	return true
}

// droppedRecords is the records of tables.
func droppedRecords(tables []lsm.TableRef) uint64 {
	r := lsm.Run{Tables: tables}
	return r.Records()
}

// dropRuns returns the runs of m that hold a table a drop request asks
// for: no ordinary merge takes them meanwhile.
func (r *Runner) dropRuns(m *lsm.Manifest) map[string]bool {
	var out map[string]bool
	for tree, ids := range DropsPending(r.Config.Node.FSM) {
		for _, run := range m.RunsOf(tree) {
			for _, t := range run.Tables {
				if slices.Contains(ids, t.ID) {
					if out == nil {
						out = map[string]bool{}
					}
					out[run.ID] = true
				}
			}
		}
	}
	return out
}
