package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/lsm"
)

// Dropping a damaged table: an operator's request (eddy-ctl tables drop)
// that links tables whose objects the bucket lost or damaged, with no copy
// to restore them from, leave the index. Until then every query of a
// target in such a table fails, and so does every merge that takes its
// run (a merge reads its inputs whole, so the runs behind it wait, and a
// full compaction never ends). The table's links are lost from answers; a
// crawl (eddy-ctl backfill restart) brings a backfill's links back. Only
// the links tree's tables may be dropped: a revocation dropped would bring
// deleted links back into answers (for good, for an account deleted since),
// and the PLC map's and the names' tables are what other records are read
// through, which no crawl writes again.
//
// The request is a replicated setting per run (dropTablesKey + the tree
// + ":" + the run's ID, its value a dropRequest: the tables to drop and
// the generation last asked at), written in one entry however many
// tables it names, so whichever node leads carries it out and every
// node's status shows it. The leader's compaction loop rewrites the run
// without those tables: the run's other tables merged into a new run as
// any merge of that one run would write them (their shared account
// dictionary counted again from their records, so nothing refers to a
// dropped table afterwards), read through a view of that run alone
// without the dropped tables (a dropped table's metadata, lost too and
// never fetched by a new leader, and any other damaged table of the
// index, do not stop it); a run whose every table is dropped is removed
// with no new run. The merge takes the big lane before the tree's full
// compaction; ordinary merges leave the run alone meanwhile. The flush
// that publishes it marks the request carried out (dropDoneKey, a cursor
// set to the request's value in the same entry). Once the run has left the
// manifest, the loop's next look deletes the request, logged as merged
// away by another merge (which read every table, so none was lost, and
// nothing was dropped) if unmarked; a mark whose request is gone is
// counted, logged as dropped and cleared (sweepDropMarks), whether the
// request was deleted so or withdrawn once the merge was handed to the
// flush. A request that changed while its merge ran (more tables named,
// or withdrawn) has that merge's result thrown away (and merged again for
// what it asks now); asking again for tables already asked changes
// nothing. A drop merge that fails
// (another table of the run is damaged too, or the account dictionary the
// run's tables share is lost with the table that held it: the log names
// the table) is tried again at the next look, then after fullRetryMin
// doubling up to fullRetryMax while the request stays the same; a drop
// of another run does not wait for it.
const (
	dropTablesKey = "drop_tables:"
	dropDoneKey   = "drop_done:"
)

// RequestMark reports whether cursor name k marks an operator's request
// carried out (a full compaction's, a drop's): not a source's position.
func RequestMark(k string) bool {
	return strings.HasPrefix(k, dropDoneKey) || strings.HasPrefix(k, fullDoneKey)
}

// dropKey is the setting that asks for tables of run of tree to be
// dropped (and, with dropDoneKey, the cursor that marks it carried out).
func dropKey(prefix string, tree lsm.Tree, run string) string {
	return prefix + string(tree) + ":" + run
}

// dropRequest is a drop request's setting: the tables of one run to drop.
type dropRequest struct {
	Generation uint64         `json:"generation"` // the manifest's when last asked
	Tables     []lsm.TableRef `json:"tables"`
}

func (d dropRequest) records() uint64 {
	r := lsm.Run{Tables: d.Tables}
	return r.Records()
}

func (d dropRequest) ids() []string {
	out := make([]string, len(d.Tables))
	for i, t := range d.Tables {
		out[i] = t.ID
	}
	return out
}

func parseDropRequest(v string) (dropRequest, error) {
	var d dropRequest
	err := json.Unmarshal([]byte(v), &d)
	return d, err
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
// ID, or a run's: every table of the run), in the manifest's order, and
// the runs holding them.
func dropTargets(m *lsm.Manifest, tree lsm.Tree, ids []string) ([]DroppedTable, map[string][]lsm.TableRef, error) {
	if tree != lsm.TreeLinks {
		return nil, nil, fmt.Errorf("%w: only tables of the links tree can be dropped, not of %q: a revocation dropped would bring deleted links back, and the other trees' records are what links are read through, which no crawl writes again (restore the object instead)", cluster.ErrBadRequest, tree)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var out []DroppedTable
	byRun := map[string][]lsm.TableRef{}
	for _, run := range m.RunsOf(tree) {
		whole := want[run.ID]
		delete(want, run.ID)
		for _, t := range run.Tables {
			if whole || want[t.ID] {
				out = append(out, DroppedTable{Tree: tree, Table: t.ID, Run: run.ID, Records: t.Records, Bytes: t.DataBytes + t.MetaBytes})
				byRun[run.ID] = append(byRun[run.ID], t)
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
		return nil, nil, fmt.Errorf("%w: no table or run of tree %s at generation %d is named %s", ErrNotInIndex, tree, m.Generation, strings.Join(missing, ", "))
	}
	return out, byRun, nil
}

// dropMu serializes the leader's changes to drop requests (each a read,
// a union and a write of a run's setting).
var dropMu sync.Mutex

// RequestDropTables asks (on the leader: the settings are proposed
// through Raft, one entry a run) that the tables of tree named by ids
// (tables or runs) be dropped from the index, and returns them. A run
// asked again gets the union of the tables asked.
func RequestDropTables(ctx context.Context, node *cluster.Node, tree lsm.Tree, ids []string) ([]DroppedTable, error) {
	dropMu.Lock()
	defer dropMu.Unlock()
	m := node.FSM.Manifest()
	tables, byRun, err := dropTargets(m, tree, ids)
	if err != nil {
		return nil, err
	}
	for _, run := range m.RunsOf(tree) {
		add := byRun[run.ID]
		if len(add) == 0 {
			continue
		}
		key := dropKey(dropTablesKey, tree, run.ID)
		req, err := parseDropRequest(node.FSM.Setting(key)) // none yet, or an unreadable one: replaced
		if err != nil || req.Generation == 0 {
			req = dropRequest{Generation: m.Generation}
		}
		n := len(req.Tables)
		for _, t := range add {
			if !slices.ContainsFunc(req.Tables, func(r lsm.TableRef) bool { return r.ID == t.ID }) {
				req.Tables = append(req.Tables, t)
			}
		}
		if len(req.Tables) == n {
			continue // asked already: a running drop merge is not started again
		}
		b, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: key, Value: string(b)}); err != nil {
			return nil, fmt.Errorf("drop tables of run %s: %w", run.ID, err)
		}
	}
	return tables, nil
}

// CancelDropTables withdraws the drop requests of tree for the tables or
// runs named by ids (every pending one of the tree if ids is empty; on the
// leader): a drop merge still running is abandoned, one already handed to
// the next flush is published. It returns the tables it withdrew.
func CancelDropTables(ctx context.Context, node *cluster.Node, tree lsm.Tree, ids []string) ([]string, error) {
	dropMu.Lock()
	defer dropMu.Unlock()
	var out []string
	for run, p := range pendingDrops(node.FSM, tree) {
		keep := p.req.Tables
		if len(ids) == 0 || slices.Contains(ids, run) {
			keep = nil
		} else {
			keep = slices.DeleteFunc(slices.Clone(keep), func(t lsm.TableRef) bool { return slices.Contains(ids, t.ID) })
		}
		if len(keep) == len(p.req.Tables) && len(keep) > 0 {
			continue // nothing of it named (a request of no readable tables goes whole)
		}
		for _, t := range p.req.Tables {
			if !slices.ContainsFunc(keep, func(k lsm.TableRef) bool { return k.ID == t.ID }) {
				out = append(out, t.ID)
			}
		}
		value := ""
		if len(keep) > 0 {
			b, err := json.Marshal(dropRequest{Generation: p.req.Generation, Tables: keep})
			if err != nil {
				return nil, err
			}
			value = string(b)
		}
		if _, err := node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: dropKey(dropTablesKey, tree, run), Value: value}); err != nil {
			return out, fmt.Errorf("withdraw the drop of run %s: %w", run, err)
		}
	}
	slices.Sort(out)
	return out, nil
}

// pendingDrop is a run's drop request: as set (value) and read (req; a
// value that does not parse is a request of no tables).
type pendingDrop struct {
	value string
	req   dropRequest
}

// pendingDrops returns tree's drop requests by run.
func pendingDrops(s *fsm.State, tree lsm.Tree) map[string]pendingDrop {
	prefix := dropKey(dropTablesKey, tree, "")
	out := map[string]pendingDrop{}
	for k, v := range s.SettingsWithPrefix(prefix) {
		req, _ := parseDropRequest(v)
		out[strings.TrimPrefix(k, prefix)] = pendingDrop{value: v, req: req}
	}
	return out
}

// DropsPending returns, by tree, the tables drop requests ask for that
// are not dropped yet (nil: none), as s says.
func DropsPending(s *fsm.State) map[lsm.Tree][]string {
	var out map[lsm.Tree][]string
	for _, t := range lsm.Trees {
		for _, p := range pendingDrops(s, t) {
			if out == nil {
				out = map[lsm.Tree][]string{}
			}
			out[t] = append(out[t], p.req.ids()...)
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
// tables merged into a new run (none if it keeps none), for the request
// whose value was asked.
type dropMerge struct {
	tree    lsm.Tree
	run     string
	asked   string
	dropped []lsm.TableRef
}

// dropHold holds back a run's drop merges after they failed, while its
// request stays asked.
type dropHold struct {
	asked string
	fails int
	until time.Time
}

// startDrop carries out tree's drop requests, if it has any: deletes
// those whose runs are no longer in m (done, dropFinished), and starts in
// the idle big lane the merge of the first run that holds tables to drop,
// that no other merge holds and whose drop is not held back after a
// failure (held). It reports whether the tree still has tables to drop,
// so that the caller starts no full compaction of it.
func (r *Runner) startDrop(ctx context.Context, w *Writer, m *lsm.Manifest, lanes *[2]lane, reserved func(string) bool, tree lsm.Tree, held func(run, asked string) bool, results chan<- mergeResult, merges *sync.WaitGroup) bool {
	drops := pendingDrops(r.Config.Node.FSM, tree)
	if len(drops) == 0 {
		return false
	}
	pending := false
	var first *lsm.Run
	var firstDrop pendingDrop
	runs := m.RunsOf(tree)
	for i := range runs {
		p, ok := drops[runs[i].ID]
		if !ok {
			continue
		}
		delete(drops, runs[i].ID)
		if len(p.req.Tables) == 0 {
			// Not written by this build: nothing to drop, and nothing
			// could withdraw it.
			w.log.Warn("drop tables: a request names no table it can read; deleted", "tree", tree, "run", runs[i].ID, "request", p.value)
			r.deleteDrop(ctx, w, tree, runs[i].ID)
			continue
		}
		pending = true
		if first == nil && !reserved(runs[i].ID) && !held(runs[i].ID, p.value) {
			first, firstDrop = &runs[i], p
		}
	}
	for run, p := range drops { // not in m
		if m.Generation < p.req.Generation {
			pending = true // asked on a manifest newer than this look's
			continue
		}
		r.dropFinished(ctx, w, tree, run, p)
	}
	if first == nil || lanes[laneBig].inputs != nil {
		return pending // a merge holding the run ends first
	}
	d := &dropMerge{tree: tree, run: first.ID, asked: firstDrop.value}
	keep := *first
	keep.Tables = nil
	for _, t := range first.Tables {
		if slices.ContainsFunc(firstDrop.req.Tables, func(x lsm.TableRef) bool { return x.ID == t.ID }) {
			d.dropped = append(d.dropped, t)
		} else {
			keep.Tables = append(keep.Tables, t)
		}
	}
	// The view of the kept tables alone: the merge reads nothing else.
	only := &lsm.Manifest{Generation: m.Generation, NextSeq: m.NextSeq}
	if len(keep.Tables) > 0 {
		only.Runs = []lsm.Run{keep}
	}
	r.startMerge(ctx, w, only, laneBig, &lanes[laneBig], tree, []lsm.Run{keep}, nil, results, merges)
	lanes[laneBig].drop = d
	w.log.Warn("dropping tables from the index at an operator's request: the run's other tables are merged into a new run", "tree", tree, "run", first.ID, "tables", len(d.dropped), "records", dropRequest{Tables: d.dropped}.records(), "kept_tables", len(keep.Tables))
	return true
}

// dropFinished deletes the request p of a run that has left the index:
// logged as merged away by another merge unless the flush that removed
// the run marked the drop carried out (dropDoneKey), which sweepDropMarks
// then counts, logs and clears.
func (r *Runner) dropFinished(ctx context.Context, w *Writer, tree lsm.Tree, run string, p pendingDrop) {
	if !r.deleteDrop(ctx, w, tree, run) {
		return
	}
	mark := r.Config.Node.FSM.Cursor(dropKey(dropDoneKey, tree, run))
	if mark == "" {
		w.log.Warn("drop tables: the run left the index through another merge before its drop, which read every one of its tables: nothing was dropped (ask again if a table is still damaged)", "tree", tree, "run", run, "tables", strings.Join(p.req.ids(), ","))
		return
	}
	if done, err := parseDropRequest(mark); err == nil && mark != p.value {
		var late []string
		for _, t := range p.req.Tables {
			if !slices.ContainsFunc(done.Tables, func(x lsm.TableRef) bool { return x.ID == t.ID }) {
				late = append(late, t.ID)
			}
		}
		if len(late) > 0 {
			w.log.Error("drop tables: tables asked while the drop of their run was being published were kept in its new run; ask again for the tables the errors name now", "tree", tree, "run", run, "tables", strings.Join(late, ","))
		}
	}
}

// deleteDrop deletes the drop request of run; false if it could not be
// proposed (tried again at the next look).
func (r *Runner) deleteDrop(ctx context.Context, w *Writer, tree lsm.Tree, run string) bool {
	if _, err := r.Config.Node.Propose(ctx, fsm.TypeSetting, 0, &fsm.Setting{Key: dropKey(dropTablesKey, tree, run)}); err != nil {
		w.log.Warn("drop tables: could not delete the request; trying again", "tree", tree, "run", run, "error", err)
		return false
	}
	return true
}

// sweepDropMarks counts, logs and clears (in the writer's next flush) the
// marks of drops carried out (dropDoneKey) whose request is gone and whose
// run is no longer in m: the request deleted (dropFinished, by this leader
// or one lost before it flushed the clearing), or withdrawn after the
// merge was handed to the flush (it was published all the same). cleared
// holds the marks this write path cleared and has not seen leave the
// state yet, so that each is counted once here.
func (r *Runner) sweepDropMarks(w *Writer, m *lsm.Manifest, cleared map[string]bool) {
	marks := r.Config.Node.FSM.CursorsWithPrefix(dropDoneKey)
	maps.DeleteFunc(cleared, func(k string, _ bool) bool { _, ok := marks[k]; return !ok })
	present := map[string]bool{}
	for _, run := range m.Runs {
		present[string(run.Tree)+":"+run.ID] = true
	}
	for k, v := range marks {
		treeRun := strings.TrimPrefix(k, dropDoneKey)
		if cleared[k] || present[treeRun] || r.Config.Node.FSM.Setting(dropTablesKey+treeRun) != "" {
			continue
		}
		cleared[k] = true
		w.SetCursor(k, "")
		tree, run, _ := strings.Cut(treeRun, ":")
		done, err := parseDropRequest(v)
		if err != nil {
			w.log.Warn("drop tables: the mark of a drop carried out does not read", "tree", tree, "run", run, "error", err)
			continue
		}
		w.metrics.TablesDropped.WithLabelValues(tree).Add(float64(len(done.Tables)))
		w.metrics.TablesDroppedLinks.WithLabelValues(tree).Add(float64(done.records()))
		w.log.Warn("dropped tables from the index: their links are gone from answers until a crawl brings them back", "tree", tree, "run", run, "tables", strings.Join(done.ids(), ","), "records", done.records())
	}
}

// dropRuns returns the runs of m that a drop request names: no ordinary
// merge takes them meanwhile.
func (r *Runner) dropRuns(m *lsm.Manifest) map[string]bool {
	var out map[string]bool
	for _, t := range lsm.Trees {
		for run := range pendingDrops(r.Config.Node.FSM, t) {
			if out == nil {
				out = map[string]bool{}
			}
			out[run] = true
		}
	}
	return out
}
