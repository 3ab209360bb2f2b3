package cluster

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/eddy-backlinks/eddy/version"
	"github.com/hashicorp/raft"
)

// The admin API: membership and status, on its own listener, apart from
// the public query API, every call authenticated with a bearer token read
// from a file. A follower forwards membership calls to the leader.
//
//	GET  /admin/status                this node
//	GET  /admin/cluster               every node (this one asks its peers)
//	POST /admin/join                  {"id","raft","http","admin"[,"suffrage","change_suffrage"]} (JoinRequest)
//	POST /admin/remove                {"id"}
//	POST /admin/transfer-leadership   {}
//	POST /admin/compact               {"full": true}: a full compaction on the leader

// adminBodyBytesMax bounds an admin request body.
const adminBodyBytesMax = 1 << 20

// adminCallTimeout bounds one admin call between nodes.
const adminCallTimeout = 25 * time.Second

// PeerStatusTimeout bounds the wait for one member's status in
// GET /admin/cluster: a member that has not answered by then (a hung
// process, a host that drops packets) shows as not answering, where it
// held the whole answer for adminCallTimeout, longer than eddy-ctl's
// default --timeout with another address to try.
const PeerStatusTimeout = 5 * time.Second

// NodeStatus is one node's view of itself.
type NodeStatus struct {
	ID             string            `json:"id"`
	Version        string            `json:"version"`
	State          string            `json:"state"`
	Suffrage       string            `json:"suffrage,omitempty"` // Voter or Nonvoter, as this node's configuration says; "" when not a member
	Leader         string            `json:"leader"`
	Term           string            `json:"term"`
	AppliedIndex   uint64            `json:"applied_index"`
	LastContactMs  int64             `json:"last_contact_ms"` // -1: never / is leader
	Generation     uint64            `json:"generation"`      // manifest generation applied by the FSM
	ViewGeneration uint64            `json:"view_generation"` // manifest generation queries are served from
	Clock          uint64            `json:"clock"`
	PublishedClock uint64            `json:"published_clock"`
	Cursors        map[string]string `json:"cursors"`
	Outlines       map[string]int    `json:"outlines"`
	SkippedEntries uint64            `json:"skipped_entries"` // Raft entries of a newer build's type, flagged skippable, applied as no-ops
	Servers        []ServerStatus    `json:"servers"`
	Extra          map[string]any    `json:"extra,omitempty"`
	Error          string            `json:"error,omitempty"` // set by /admin/cluster for a node that did not answer

	// StoreAnswers: this node's last probe of the object store was
	// answered. False from an older build (which does not say) and before
	// the first probe: only a node that saw its store answer says so.
	StoreAnswers bool `json:"store_answers,omitempty"`

	// ServedGeneration is the oldest manifest generation whose tables this
	// node may still read: its view's, or an older one a query in flight
	// holds. The leader's garbage collector deletes a table only once every
	// member serves at or past the generation that removed it. 0: not
	// reported (an older build), then ViewGeneration stands for it.
	ServedGeneration uint64 `json:"served_generation,omitempty"`
}

// ServerStatus is a configuration member.
type ServerStatus struct {
	ID       string `json:"id"`
	Raft     string `json:"raft"`
	Suffrage string `json:"suffrage"`
	Admin    string `json:"admin,omitempty"`
	HTTP     string `json:"http,omitempty"`
}

// Admin serves the admin API of a node.
type Admin struct {
	node  *Node
	token []byte
	// Extra, if set, adds fields to this node's status (the serving view,
	// ingest state).
	Extra func() (viewGeneration uint64, extra map[string]any)
	// Served, if set, reports ServedGeneration (query.Views.OldestServed).
	Served func() uint64
	// StoreAnswers, if set, reports StoreAnswers: this node's last probe
	// of its object store was answered (objstore.Guard.Answering).
	StoreAnswers func() bool
	// Compact, if set, asks for a full compaction or withdraws one (on
	// the leader: a follower forwards the call) and returns what to
	// answer.
	Compact func(ctx context.Context, req CompactRequest) (map[string]any, error)
	// BackfillRestart, if set, asks every backfill source to crawl the
	// network again (on the leader: a follower forwards the call) and
	// returns what to answer.
	BackfillRestart func(ctx context.Context) (map[string]any, error)
	// DropTables, if set, asks for damaged tables to be dropped from the
	// index, or withdraws such requests (on the leader: a follower
	// forwards the call), and returns what to answer.
	DropTables func(ctx context.Context, req DropTablesRequest) (map[string]any, error)
	// Transfer, if set, hands the leadership over in place of
	// Node.TransferLeadership (the write path stopped first:
	// ingest.Supervisor.HandOver).
	Transfer func(ctx context.Context) error
	http     *http.Client
}

// NewAdmin returns the admin API of n, requiring token.
func NewAdmin(n *Node, token string) (*Admin, error) {
	if len(token) < 16 {
		return nil, errors.New("admin token must be at least 16 characters")
	}
	hc, err := HTTPClient(n.cfg.SourceAddr, adminCallTimeout)
	if err != nil {
		return nil, err
	}
	return &Admin{node: n, token: []byte(token), http: hc}, nil
}

// Handler returns the HTTP handler.
func (a *Admin) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/status", a.handleStatus)
	mux.HandleFunc("GET /admin/cluster", a.handleCluster)
	mux.HandleFunc("POST /admin/join", a.handleJoin)
	mux.HandleFunc("POST /admin/remove", a.handleRemove)
	mux.HandleFunc("POST /admin/transfer-leadership", a.handleTransfer)
	mux.HandleFunc("POST /admin/compact", a.handleCompact)
	mux.HandleFunc("POST /admin/backfill/restart", a.handleBackfillRestart)
	mux.HandleFunc("POST /admin/tables/drop", a.handleDropTables)
	return a.auth(mux)
}

func (a *Admin) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), a.token) != 1 {
			writeErr(w, http.StatusUnauthorized, "Unauthorized", "a valid admin token is required")
			return
		}
		next.ServeHTTP(w, r)
	})
}

type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

func writeErr(w http.ResponseWriter, code int, name, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(apiError{Error: name, Message: msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// Status returns this node's status.
func (a *Admin) Status() NodeStatus {
	n := a.node
	sum := n.FSM.Summary()
	stats := n.raft.Stats()
	leader, _ := n.Leader()
	st := NodeStatus{
		ID: n.cfg.ID, Version: version.Version, State: n.raft.State().String(), Leader: leader, Term: stats["term"],
		AppliedIndex: n.raft.AppliedIndex(), Generation: sum.Generation, Clock: sum.Clock, PublishedClock: sum.Published,
		Cursors: sum.Cursors, Outlines: sum.Outlines, SkippedEntries: sum.Skipped, LastContactMs: -1,
	}
	if lc := n.raft.LastContact(); !lc.IsZero() && !n.IsLeader() {
		st.LastContactMs = time.Since(lc).Milliseconds()
	}
	if servers, err := n.Servers(); err == nil {
		for _, s := range servers {
			ss := ServerStatus{ID: string(s.ID), Raft: string(s.Address), Suffrage: s.Suffrage.String()}
			if ss.ID == n.cfg.ID {
				st.Suffrage = ss.Suffrage
			}
			if ni, ok := n.FSM.Node(ss.ID); ok {
				ss.Admin, ss.HTTP = ni.Admin, ni.HTTP
			}
			st.Servers = append(st.Servers, ss)
		}
	}
	if a.Extra != nil {
		st.ViewGeneration, st.Extra = a.Extra()
	}
	if a.Served != nil {
		st.ServedGeneration = a.Served()
	}
	if a.StoreAnswers != nil {
		st.StoreAnswers = a.StoreAnswers()
	}
	return st
}

// VoterReachesStore reports whether another voter answers that its object
// store answered its last probe (StoreAnswers): a leader whose store does
// not answer it alone should hand leadership to such a voter, while one
// whose store answers nobody keeps it. A voter that does not say so (an
// older build, one not yet probed, one whose last probe failed) does not
// count.
func (a *Admin) VoterReachesStore(ctx context.Context) bool {
	servers, err := a.node.Servers()
	if err != nil {
		return false
	}
	found := make(chan bool, len(servers))
	asked := 0
	for _, s := range servers {
		id := string(s.ID)
		if id == a.node.cfg.ID || s.Suffrage != raft.Voter {
			continue
		}
		asked++
		go func() {
			st, err := a.memberStatus(ctx, id)
			found <- err == nil && st.StoreAnswers
		}()
	}
	for range asked {
		if <-found {
			return true
		}
	}
	return false
}

// MemberServed is the oldest manifest generation one member of the
// configuration serves, or why it could not be asked.
type MemberServed struct {
	ID         string
	Generation uint64
	Err        error // down, unreachable, no admin address known
}

// MembersServed asks every member of the Raft configuration (voters and
// non-voters; a removed node is no longer a member) for the oldest
// generation it serves (ServedGeneration, else ViewGeneration for an older
// build), concurrently; this node answers for itself. A member that does
// not answer within ctx has Err set: the caller must treat it as serving
// nothing newer than generation 0.
func (a *Admin) MembersServed(ctx context.Context) ([]MemberServed, error) {
	servers, err := a.node.Servers()
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	out := make([]MemberServed, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		out[i].ID = string(s.ID)
		if out[i].ID == a.node.cfg.ID {
			st := a.Status()
			out[i].Generation = servedOf(st)
			continue
		}
		wg.Go(func() {
			st, err := a.memberStatus(ctx, out[i].ID)
			if err != nil {
				out[i].Err = err
				return
			}
			out[i].Generation = servedOf(st)
		})
	}
	wg.Wait()
	return out, nil
}

// memberStatus asks member id for its status at its admin address. An
// answer from another node at that address (one started in its place
// before the member was removed) is an error: it says nothing of the
// member.
func (a *Admin) memberStatus(ctx context.Context, id string) (NodeStatus, error) {
	var st NodeStatus
	ni, ok := a.node.FSM.Node(id)
	if !ok || ni.Admin == "" {
		return st, errors.New("admin address unknown")
	}
	if err := a.call(ctx, ni.Admin, http.MethodGet, "/admin/status", nil, &st); err != nil {
		return st, err
	}
	if st.ID != id {
		return st, fmt.Errorf("its admin address %s is answered by node %q", ni.Admin, st.ID)
	}
	return st, nil
}

// servedOf is the oldest generation a status says its node serves.
func servedOf(st NodeStatus) uint64 {
	if st.ServedGeneration != 0 {
		return st.ServedGeneration
	}
	return st.ViewGeneration
}

func (a *Admin) handleStatus(w http.ResponseWriter, r *http.Request) { writeJSON(w, a.Status()) }

// forward sends a membership call to the leader when this node is not it.
// It returns true when it handled the request.
func (a *Admin) forward(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if a.node.IsLeader() {
		return false
	}
	if r.Header.Get("X-Eddy-Forwarded") != "" {
		writeErr(w, http.StatusServiceUnavailable, "NotLeader", "forwarded to a node that is not the leader")
		return true
	}
	id, _ := a.node.Leader()
	ni, ok := a.node.FSM.Node(id)
	if id == "" || !ok || ni.Admin == "" {
		writeErr(w, http.StatusServiceUnavailable, "NoLeader", "no leader is known yet; retry (if this lasts, a majority of the voters is down or cut off: eddy-ctl status shows which, and docs/operations.md, \"Losing two of three nodes\", what to do)")
		return true
	}
	var resp json.RawMessage
	if err := a.call(r.Context(), ni.Admin, r.Method, r.URL.Path, body, &resp); err != nil {
		var ae *CallError
		if errors.As(err, &ae) {
			writeErr(w, ae.Status, ae.Name, ae.Message)
		} else {
			writeErr(w, http.StatusBadGateway, "LeaderUnreachable", err.Error())
		}
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(resp)
	return true
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, adminBodyBytesMax))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "InvalidRequest", err.Error())
		return nil, false
	}
	return b, true
}

func (a *Admin) handleJoin(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || a.forward(w, r, body) {
		return
	}
	var req JoinRequest
	if err := json.Unmarshal(body, &req); err != nil || req.ID == "" || req.Raft == "" {
		writeErr(w, http.StatusBadRequest, "InvalidRequest", "join needs a JSON body with id and raft")
		return
	}
	if err := req.check(); err != nil {
		writeErr(w, http.StatusBadRequest, "InvalidRequest", err.Error())
		return
	}
	if _, _, err := net.SplitHostPort(req.Raft); err != nil {
		writeErr(w, http.StatusBadRequest, "InvalidRequest", "raft: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), MembershipTimeout)
	defer cancel()
	if err := a.node.JoinAs(ctx, req); err != nil {
		code, name := http.StatusInternalServerError, "JoinFailed"
		switch {
		case errors.Is(err, ErrRemoved):
			code, name = http.StatusForbidden, "Removed"
		case errors.Is(err, ErrSuffrage):
			code, name = http.StatusConflict, "SuffrageRefused"
		case errors.Is(err, ErrFreshVoter):
			code, name = http.StatusConflict, "FreshVoter"
		}
		writeErr(w, code, name, err.Error())
		return
	}
	suffrage := ""
	if servers, err := a.node.Servers(); err == nil {
		for _, s := range servers {
			if string(s.ID) == req.ID {
				suffrage = s.Suffrage.String()
			}
		}
	}
	if req.Check {
		writeJSON(w, map[string]string{"may_join": req.ID, "suffrage": suffrage})
		return
	}
	writeJSON(w, map[string]string{"joined": req.ID, "suffrage": suffrage})
}

func (a *Admin) handleRemove(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || a.forward(w, r, body) {
		return
	}
	var req struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.ID == "" {
		writeErr(w, http.StatusBadRequest, "InvalidRequest", "remove needs a JSON body with id")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), MembershipTimeout)
	defer cancel()
	if err := a.node.Remove(ctx, req.ID); err != nil {
		writeErr(w, http.StatusInternalServerError, "RemoveFailed", err.Error())
		return
	}
	writeJSON(w, map[string]string{"removed": req.ID})
}

func (a *Admin) handleTransfer(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || a.forward(w, r, body) {
		return
	}
	timeout, transfer := MembershipTimeout, a.node.TransferLeadership
	if a.Transfer != nil {
		// Stopping the write path first takes up to its last flush's 10 s.
		timeout, transfer = MembershipTimeout+10*time.Second, a.Transfer
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	if err := transfer(ctx); err != nil {
		writeErr(w, http.StatusInternalServerError, "TransferFailed", err.Error())
		return
	}
	id, _ := a.node.Leader()
	writeJSON(w, map[string]string{"leader": id})
}

// CompactRequest is the body of POST /admin/compact: one of Full and
// Cancel.
type CompactRequest struct {
	Full   bool `json:"full"`             // merge every run of each tree into one (the only kind asked for now)
	Cancel bool `json:"cancel,omitempty"` // withdraw a requested full compaction
}

func (a *Admin) handleCompact(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || a.forward(w, r, body) {
		return
	}
	var req CompactRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Full == req.Cancel {
		writeErr(w, http.StatusBadRequest, "InvalidRequest", `want {"full": true} or {"cancel": true}`)
		return
	}
	if a.Compact == nil {
		writeErr(w, http.StatusNotImplemented, "NotImplemented", "this node runs no write path")
		return
	}
	out, err := a.Compact(r.Context(), req)
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, "CompactFailed", err.Error())
		return
	}
	writeJSON(w, out)
}

func (a *Admin) handleBackfillRestart(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || a.forward(w, r, body) {
		return
	}
	if a.BackfillRestart == nil {
		writeErr(w, http.StatusNotImplemented, "NotImplemented", "this node runs no write path")
		return
	}
	out, err := a.BackfillRestart(r.Context())
	if errors.Is(err, ErrNothingToDo) {
		writeErr(w, http.StatusConflict, "NoBackfill", err.Error())
		return
	}
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, "RestartFailed", err.Error())
		return
	}
	writeJSON(w, out)
}

// DropTablesRequest is the body of POST /admin/tables/drop: the tables
// (or runs: every table of each) of one tree to drop from the index, or,
// with Cancel, the drop requests to withdraw (every pending one of the
// tree if Tables is empty).
type DropTablesRequest struct {
	Tree   string   `json:"tree"`
	Tables []string `json:"tables"`
	Cancel bool     `json:"cancel,omitempty"`
}

func (a *Admin) handleDropTables(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok || a.forward(w, r, body) {
		return
	}
	var req DropTablesRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Tree == "" || (len(req.Tables) == 0 && !req.Cancel) {
		writeErr(w, http.StatusBadRequest, "InvalidRequest", `want {"tree": "links", "tables": ["<table or run ID>", ...]}, or {"tree": ..., "cancel": true}`)
		return
	}
	if a.DropTables == nil {
		writeErr(w, http.StatusNotImplemented, "NotImplemented", "this node runs no write path")
		return
	}
	out, err := a.DropTables(r.Context(), req)
	if errors.Is(err, ErrNotFound) {
		writeErr(w, http.StatusNotFound, "NotFound", err.Error())
		return
	}
	if errors.Is(err, ErrBadRequest) {
		writeErr(w, http.StatusBadRequest, "InvalidRequest", err.Error())
		return
	}
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, "DropFailed", err.Error())
		return
	}
	writeJSON(w, out)
}

// ErrBadRequest: an admin request the leader refuses as asked (a table
// of a tree that cannot be dropped); answered 400.
var ErrBadRequest = errors.New("refused")

// ErrNotFound: an admin request named something the cluster does not
// hold (a table to drop); answered 404.
var ErrNotFound = errors.New("not found")

// ErrNothingToDo: an admin request the leader has nothing to carry it out
// with (a backfill restart without a backfill source); answered 409.
var ErrNothingToDo = errors.New("nothing to do")

// CallError is an error answer of the admin API.
type CallError struct {
	Status        int
	Name, Message string
}

func (e *CallError) Error() string { return fmt.Sprintf("%s (%d): %s", e.Name, e.Status, e.Message) }

func (a *Admin) call(ctx context.Context, addr, method, path string, body []byte, out any) error {
	c := AdminClient{Addrs: []string{addr}, Token: string(a.token), HTTP: a.http, forwarded: true}
	return c.Call(ctx, method, path, body, out)
}

// AdminClient calls the admin API, trying each address in turn on a
// connection failure, a timeout or a 5xx answer.
type AdminClient struct {
	Addrs     []string // host:port or http://host:port
	Token     string
	HTTP      *http.Client
	forwarded bool
}

// Call performs one call; out receives the JSON answer.
func (c *AdminClient) Call(ctx context.Context, method, path string, body []byte, out any) error {
	if len(c.Addrs) == 0 {
		return errors.New("no admin address")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: adminCallTimeout}
	}
	var errs []error
	for _, addr := range c.Addrs {
		base := addr
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.Token)
		req.Header.Set("Content-Type", "application/json")
		if c.forwarded {
			req.Header.Set("X-Eddy-Forwarded", "1")
		}
		resp, err := hc.Do(req)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		if resp.StatusCode != http.StatusOK {
			var ae apiError
			json.Unmarshal(b, &ae)
			ce := &CallError{Status: resp.StatusCode, Name: ae.Error, Message: ae.Message}
			if ce.Name == "" {
				ce.Name, ce.Message = http.StatusText(resp.StatusCode), strings.TrimSpace(string(b))
			}
			if resp.StatusCode >= 500 {
				errs = append(errs, fmt.Errorf("%s: %w", addr, ce))
				continue
			}
			return ce
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				return fmt.Errorf("%s: bad answer: %w", addr, err)
			}
		}
		return nil
	}
	return errors.Join(errs...)
}

// EnvAdminToken names the environment variable that may hold the admin
// token itself (node and eddy-ctl alike).
const EnvAdminToken = "EDDY_ADMIN_TOKEN"

// ErrNoAdminToken: neither a token file nor $EDDY_ADMIN_TOKEN gives one.
var ErrNoAdminToken = errors.New("no admin token")

// ReadAdminToken reads the admin token as every Eddy command does: from
// file when one is named (an empty file is refused), else from
// $EDDY_ADMIN_TOKEN (ErrNoAdminToken when that is empty too).
func ReadAdminToken(file string) (string, error) {
	if file == "" {
		if tok := strings.TrimSpace(os.Getenv(EnvAdminToken)); tok != "" {
			return tok, nil
		}
		return "", ErrNoAdminToken
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("admin token: %s is empty", file)
	}
	return tok, nil
}
