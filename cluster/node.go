// Package cluster runs one Eddy node's part of the Raft cluster: the
// hashicorp/raft instance over mutual TLS, its log and snapshot stores, the
// replicated state (fsm.State), membership (bootstrap, join, remove,
// leadership transfer) and the admin API other nodes and eddy-ctl use.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/version"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Raft timing. Chosen so that a lost leader is replaced within a few
// seconds on small VPSes, without elections on a busy node's GC pause.
const (
	DefaultHeartbeatTimeout   = 1000 * time.Millisecond
	DefaultElectionTimeout    = 1000 * time.Millisecond
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond
	DefaultCommitTimeout      = 50 * time.Millisecond
	// DefaultSnapshotThreshold: entries between snapshots. Entries are
	// small (a flush every few seconds), so this bounds the log to a few
	// megabytes and a restart replays at most minutes of history.
	DefaultSnapshotThreshold = 8192
	DefaultSnapshotInterval  = 2 * time.Minute
	// DefaultTrailingLogs: entries kept after a snapshot, so a briefly
	// lagging follower catches up from the log, not a snapshot install.
	DefaultTrailingLogs = 4096
	// MembershipTimeout bounds every membership change.
	MembershipTimeout = 10 * time.Second
	// ProposeTimeout bounds one proposal.
	ProposeTimeout    = 10 * time.Second
	snapshotsRetained = 3
	transportPool     = 3
	transportTimeout  = 10 * time.Second
)

// Errors.
var (
	ErrNotLeader = errors.New("cluster: not the leader")
	ErrRemoved   = errors.New("cluster: node was removed")
	ErrNodeID    = errors.New("cluster: node ID mismatch")
)

// Config configures a node.
type Config struct {
	ID            string // node ID; persisted in Dir at first start, then must match
	Dir           string // raft log, stable store, snapshots, node-id
	RaftBind      string // host:port to listen on
	RaftAdvertise string // host:port peers dial; RaftBind when empty
	HTTPAddr      string // advertised public query address
	AdminAddr     string // advertised admin address
	// SourceAddr, when set, is the local IP this node's connections to its
	// peers (Raft, admin calls) leave from; the system chooses when empty.
	SourceAddr string
	Certs      CertFiles
	Bootstrap  bool // form a new cluster of this node if no state exists
	// Restore, when set, is a snapshot of the replicated state (a backup
	// from the bucket: ingest.ReadStateBackup) to form a new one-node cluster
	// with, in a data directory that holds no Raft state (Open refuses one
	// that does). Bootstrap does not matter then.
	Restore []byte
	Logger  hclog.Logger

	// Timing; zero takes the defaults above.
	HeartbeatTimeout  time.Duration
	ElectionTimeout   time.Duration
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64

	testBlock func(peerID, addr string) bool    // partitions in tests
	testLogs  func(raft.LogStore) raft.LogStore // wraps the log store (faults in tests)
}

// Node is a running cluster member.
type Node struct {
	cfg   Config
	log   hclog.Logger
	FSM   *fsm.State
	raft  *raft.Raft
	trans *raft.NetworkTransport
	store *raftboltdb.BoltStore

	obsCh    chan raft.Observation
	observer *raft.Observer

	mu struct {
		sync.Mutex
		leaderFns []func(bool)
	}
	done chan struct{}
	wg   sync.WaitGroup
	// hadState: the node opened with Raft state (a log or a snapshot): it
	// had been a member.
	hadState bool
}

// HadState reports whether the node opened with Raft state of its own (a
// member before this start), not an empty data directory.
func (n *Node) HadState() bool { return n.hadState }

// readNodeID returns the ID persisted in dir, or want (a new one if empty)
// when none is (keepNodeID persists it once the node's certificate has
// loaded); a different persisted ID is an error (a data directory belongs
// to one node).
func readNodeID(dir, want string) (string, error) {
	path := filepath.Join(dir, "node-id")
	b, err := os.ReadFile(path)
	if err == nil {
		have := strings.TrimSpace(string(b))
		if want != "" && want != have {
			return "", fmt.Errorf("%s holds node %q, configured %q: %w", dir, have, want, ErrNodeID)
		}
		return have, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if want == "" {
		var r [6]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		want = "node-" + hex.EncodeToString(r[:])
	}
	return want, nil
}

// keepNodeID binds dir to id, once the node's certificate has loaded: a
// start refused for a mistyped --id leaves the directory free.
func keepNodeID(dir, id string) error {
	path := filepath.Join(dir, "node-id")
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	return os.WriteFile(path, []byte(id+"\n"), 0o644)
}

// Open starts a node: with existing state it rejoins its cluster; with
// none and Bootstrap it forms a one-node cluster; with neither it waits to
// be added by `eddy-ctl join`.
func Open(cfg Config) (*Node, error) {
	if cfg.Dir == "" || cfg.RaftBind == "" {
		return nil, errors.New("cluster: Dir and RaftBind are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	id, err := readNodeID(cfg.Dir, cfg.ID)
	if err != nil {
		return nil, err
	}
	cfg.ID = id
	if cfg.RaftAdvertise == "" {
		cfg.RaftAdvertise = cfg.RaftBind
	}
	n := &Node{cfg: cfg, log: cfg.Logger.Named("cluster"), FSM: fsm.New(), done: make(chan struct{})}

	tlsCfg, err := LoadTLS(cfg.Certs, n.acceptPeer)
	if err != nil {
		return nil, err
	}
	if err := keepNodeID(cfg.Dir, cfg.ID); err != nil {
		return nil, err
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.RaftAdvertise)
	if err != nil {
		return nil, fmt.Errorf("raft advertise address: %w", err)
	}
	stream, err := newTLSStream(cfg.RaftBind, adv, tlsCfg)
	if err != nil {
		return nil, fmt.Errorf("raft listen: %w", err)
	}
	if stream.source, err = sourceAddr(cfg.SourceAddr); err != nil {
		stream.Close()
		return nil, err
	}
	if cfg.testBlock != nil {
		stream.block = cfg.testBlock
	}
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: transportPool, Timeout: transportTimeout, Logger: cfg.Logger.Named("raft-net"),
	})
	n.store, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.Dir, raftDBFile)})
	if err != nil {
		n.trans.Close()
		return nil, fmt.Errorf("raft store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, snapshotsRetained, cfg.Logger.Named("snapshots"))
	if err != nil {
		n.closeStores()
		return nil, err
	}

	rc := raft.DefaultConfig()
	rc.ProtocolVersion = raft.ProtocolVersionMax
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = orDur(cfg.HeartbeatTimeout, DefaultHeartbeatTimeout)
	rc.ElectionTimeout = orDur(cfg.ElectionTimeout, DefaultElectionTimeout)
	rc.LeaderLeaseTimeout = min(DefaultLeaderLeaseTimeout, rc.HeartbeatTimeout)
	rc.CommitTimeout = DefaultCommitTimeout
	rc.SnapshotThreshold = orU64(cfg.SnapshotThreshold, DefaultSnapshotThreshold)
	rc.SnapshotInterval = orDur(cfg.SnapshotInterval, DefaultSnapshotInterval)
	rc.TrailingLogs = orU64(cfg.TrailingLogs, DefaultTrailingLogs)
	rc.MaxAppendEntries = 64
	rc.BatchApplyCh = true
	rc.ShutdownOnRemove = true
	rc.NoSnapshotRestoreOnStart = false
	rc.Logger = cfg.Logger.Named("raft")
	if err := raft.ValidateConfig(rc); err != nil {
		n.closeStores()
		return nil, err
	}
	// Manual recovery after losing a majority: a peers.json beside raft.db
	// replaces the configuration (docs/operations.md), once.
	peers := filepath.Join(cfg.Dir, "peers.json")
	if _, err := os.Stat(peers); err == nil {
		conf, err := raft.ReadConfigJSON(peers)
		if err != nil {
			n.closeStores()
			return nil, fmt.Errorf("recovery: %s: %w", peers, err)
		}
		if err := raft.RecoverCluster(rc, fsm.New(), n.store, n.store, snaps, n.trans, conf); err != nil {
			n.closeStores()
			return nil, fmt.Errorf("recovery: %w", err)
		}
		if err := os.Remove(peers); err != nil {
			n.closeStores()
			return nil, fmt.Errorf("recovery: remove %s: %w", peers, err)
		}
		n.log.Warn("recovered the cluster configuration from peers.json", "servers", len(conf.Servers))
	}
	existing, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil {
		n.closeStores()
		return nil, err
	}
	n.hadState = existing
	if cfg.Restore != nil {
		if existing {
			n.closeStores()
			return nil, fmt.Errorf("restore: %s already holds Raft state; a restore starts a new cluster in an empty data directory", cfg.Dir)
		}
		if err := installRestore(snaps, n.trans, rc.LocalID, cfg.RaftAdvertise, cfg.Restore); err != nil {
			n.closeStores()
			return nil, err
		}
		existing = true
		n.log.Warn("starting a new cluster of this node from a backup of the replicated state")
	}
	var started atomic.Pointer[raft.Raft] // for the log store, once Raft has started
	var logs raft.LogStore = snapshotLogs{LogStore: n.store, lastSnapshot: raftSnapshot(&started)}
	if cfg.testLogs != nil {
		logs = cfg.testLogs(logs)
	}
	n.raft, err = raft.NewRaft(rc, n.FSM, logs, n.store, snaps, n.trans)
	if err != nil {
		n.closeStores()
		return nil, err
	}
	started.Store(n.raft)
	if cfg.Bootstrap && !existing {
		f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: rc.LocalID, Address: raft.ServerAddress(cfg.RaftAdvertise), Suffrage: raft.Voter,
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			n.Close(context.Background())
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	n.obsCh = make(chan raft.Observation, 16)
	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(n.observer)
	n.wg.Add(1)
	go n.watchLeadership()
	return n, nil
}

func orDur(v, d time.Duration) time.Duration {
	if v == 0 {
		return d
	}
	return v
}

func orU64(v, d uint64) uint64 {
	if v == 0 {
		return d
	}
	return v
}

func (n *Node) closeStores() {
	if n.trans != nil {
		n.trans.Close()
	}
	if n.store != nil {
		n.store.Close()
	}
}

// acceptPeer refuses Raft connections from removed nodes.
func (n *Node) acceptPeer(peerID string) error {
	if ni, ok := n.FSM.Node(peerID); ok && ni.Removed {
		return fmt.Errorf("peer %q: %w", peerID, ErrRemoved)
	}
	return nil
}

// ID is the node's ID.
func (n *Node) ID() string { return n.cfg.ID }

// Config returns the node's configuration.
func (n *Node) Config() Config { return n.cfg }

// Raft exposes the raft instance (status, tests).
func (n *Node) Raft() *raft.Raft { return n.raft }

// IsLeader reports whether this node is the leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the leader's ID and Raft address, if known.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// OnLeadership registers fn, called (in order, from one goroutine) with
// true when this node becomes leader and false when it stops being leader.
func (n *Node) OnLeadership(fn func(isLeader bool)) {
	n.mu.Lock()
	n.mu.leaderFns = append(n.mu.leaderFns, fn)
	n.mu.Unlock()
}

func (n *Node) watchLeadership() {
	defer n.wg.Done()
	was := false
	var wasTerm uint64
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.done:
			if was {
				n.callLeader(false)
			}
			return
		case <-n.obsCh:
		case <-tick.C:
		}
		is := n.IsLeader()
		term := n.raft.CurrentTerm()
		// Leading again in a later term, even if no sample saw the node
		// follow in between, is a new leadership: its callbacks run again
		// (a write path stopped by the lost term starts anew).
		if is == was && (!is || term == wasTerm) {
			continue
		}
		was, wasTerm = is, term
		if is {
			n.log.Info("became leader", "term", term)
			// Record this node's own addresses if the state lacks them.
			go n.registerSelf()
		} else {
			n.log.Info("lost leadership")
		}
		n.callLeader(is)
	}
}

func (n *Node) callLeader(is bool) {
	n.mu.Lock()
	fns := append([]func(bool){}, n.mu.leaderFns...)
	n.mu.Unlock()
	for _, fn := range fns {
		fn(is)
	}
}

func (n *Node) registerSelf() {
	ctx, cancel := context.WithTimeout(context.Background(), ProposeTimeout)
	defer cancel()
	defer n.proposeLeaderEntries(ctx)
	want := fsm.NodeInfo{ID: n.cfg.ID, HTTP: n.cfg.HTTPAddr, Admin: n.cfg.AdminAddr, Raft: n.cfg.RaftAdvertise}
	if have, ok := n.FSM.Node(n.cfg.ID); ok && have == want {
		return
	}
	if _, err := n.Propose(ctx, fsm.TypeNodeInfo, 0, want); err != nil {
		n.log.Warn("record own addresses", "error", err)
	}
}

// proposeLeaderEntries proposes the entries this build writes at each
// leadership (fsm.LeaderEntries: none in a default build).
func (n *Node) proposeLeaderEntries(ctx context.Context) {
	es, err := fsm.LeaderEntries(n.cfg.ID, version.Version)
	if err != nil {
		n.log.Warn("leader entries", "error", err)
		return
	}
	for _, e := range es {
		if _, err := n.ProposeRaw(ctx, e.Data); err != nil {
			n.log.Warn("propose leader entry", "type", e.Type.String(), "error", err)
			continue
		}
		n.log.Info("proposed leader entry", "type", e.Type.String(), "skippable", e.Flags&fsm.FlagSkippable != 0, "index", n.raft.AppliedIndex())
	}
}

// LastCommandIndex is the index of the last command entry (one the state
// machine applies; configuration changes and no-ops are not) at or below
// upTo in this node's log, looking back at most 64 entries; 0 if none is
// found there (the log before it is in the snapshot, which the state
// machine restored at start).
func (n *Node) LastCommandIndex(upTo uint64) uint64 {
	var l raft.Log
	for i := upTo; i > 0 && upTo-i < 64; i-- {
		if err := n.store.GetLog(i, &l); err != nil {
			return 0
		}
		if l.Type == raft.LogCommand {
			return i
		}
	}
	return 0
}

// Propose commits an entry through Raft (leader only) and returns its
// Apply response; an Apply error (a stale flush) is returned as the error.
func (n *Node) Propose(ctx context.Context, t fsm.Type, flags uint8, payload any) (any, error) {
	b, err := fsm.Encode(t, flags, payload)
	if err != nil {
		return nil, err
	}
	return n.ProposeRaw(ctx, b)
}

// ProposeRaw commits an encoded entry.
func (n *Node) ProposeRaw(ctx context.Context, b []byte) (any, error) {
	if !n.IsLeader() {
		return nil, ErrNotLeader
	}
	timeout := ProposeTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	f := n.raft.Apply(b, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return nil, fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return nil, err
	}
	resp := f.Response()
	if err, ok := resp.(error); ok {
		return nil, err
	}
	return resp, nil
}

// Barrier waits until every committed entry is applied on the leader.
func (n *Node) Barrier(timeout time.Duration) error { return n.raft.Barrier(timeout).Error() }

// Suffrage names a server's part in the configuration, as the admin API
// spells it (Raft's names; a JoinRequest may use any case).
const (
	SuffrageVoter    = "Voter"    // votes, counts for quorum, may lead
	SuffrageNonvoter = "Nonvoter" // a query node: applies the log and serves, never votes or leads
)

// ErrSuffrage: a membership change the configuration refuses.
var ErrSuffrage = errors.New("cluster: suffrage change refused")

// Remove takes a node out of the cluster for good: its ID is recorded as
// removed (so its connections and re-joins are refused), then it leaves
// the configuration.
func (n *Node) Remove(ctx context.Context, id string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if id == n.cfg.ID {
		return errors.New("remove: transfer leadership away from this node first")
	}
	servers, err := n.Servers()
	if err != nil {
		return err
	}
	member := false
	for _, s := range servers {
		member = member || string(s.ID) == id
	}
	if !member {
		if _, known := n.FSM.Node(id); !known {
			return fmt.Errorf("remove %s: not a member of the cluster", id)
		}
	}
	info, _ := n.FSM.Node(id)
	info.ID, info.Removed = id, true
	if _, err := n.Propose(ctx, fsm.TypeNodeInfo, 0, info); err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, MembershipTimeout).Error(); err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	return nil
}

// TransferLeadership hands leadership to another voter and waits for it.
func (n *Node) TransferLeadership(ctx context.Context) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if err := n.raft.LeadershipTransfer().Error(); err != nil {
		return fmt.Errorf("transfer leadership: %w", err)
	}
	deadline := time.Now().Add(MembershipTimeout)
	for time.Now().Before(deadline) {
		if id, _ := n.Leader(); id != "" && id != n.cfg.ID {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("transfer leadership: no new leader in time")
}

// Servers returns the current configuration.
func (n *Node) Servers() ([]raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}

func voters(servers []raft.Server) int {
	v := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}

// Close stops the node. A leader first hands leadership to another voter
// (so the cluster does not wait out an election), then Raft shuts down.
func (n *Node) Close(ctx context.Context) error {
	if n.raft != nil && n.IsLeader() {
		if servers, err := n.Servers(); err == nil && voters(servers) > 1 {
			if err := n.TransferLeadership(ctx); err != nil {
				n.log.Warn("leadership transfer before shutdown", "error", err)
			}
		}
	}
	select {
	case <-n.done:
	default:
		close(n.done)
	}
	var err error
	if n.raft != nil {
		n.raft.DeregisterObserver(n.observer)
		err = n.raft.Shutdown().Error()
	}
	n.wg.Wait()
	n.closeStores()
	return err
}
