// Command eddy-node runs one node of an Eddy cluster: a Raft member that
// serves queries from the manifest it has applied and, while it leads,
// ingests the configured sources.
//
// Every option is a flag, an environment variable (EDDY_ and the flag name
// in upper case with '-' as '_') or a line of the --config file, in that
// order of precedence (config.go); secrets (the admin token, S3 keys, TLS
// keys) come only from files or the environment, never from flags, and are
// never logged.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest"
	"github.com/eddy-backlinks/eddy/internal/backoff"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/query"
	"github.com/eddy-backlinks/eddy/version"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parseConfig(args, os.LookupEnv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "eddy", Level: hclog.Info, Output: stderr})
	if err != nil {
		log.Error("invalid configuration", "error", err)
		return 2
	}
	if c.showVersion {
		fmt.Fprintln(stdout, version.Version)
		return 0
	}
	if err := c.validate(os.LookupEnv); err != nil {
		log.Error("invalid configuration", "error", err)
		return 2
	}
	token, err := adminToken(*c)
	if err != nil { // an empty or unreadable file: configuration, as for the other files
		log.Error("invalid configuration", "error", err)
		return 2
	}
	log.SetLevel(hclog.LevelFromString(c.logLevel))
	log.Info("configuration", c.logged()...)
	ml := resolveMemoryLimit(c.memoryLimit, os.LookupEnv, "/")
	if limit := applyMemoryLimit(ml); limit == math.MaxInt64 {
		log.Info("memory limit: none", "why", ml.why)
	} else {
		log.Info("memory limit", "bytes", limit, "why", ml.why)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *c, token, log); err != nil {
		log.Error("node stopped", "error", err)
		return 1
	}
	return 0
}

// adminToken reads the admin token as eddy-ctl does
// (cluster.ReadAdminToken: the named file first, else $EDDY_ADMIN_TOKEN).
func adminToken(c config) (string, error) {
	tok, err := cluster.ReadAdminToken(c.tokenFile)
	if errors.Is(err, cluster.ErrNoAdminToken) {
		return "", nil // the configuration's check says which is required
	}
	return tok, err
}

// serve runs the node until ctx ends: it wires the store, Raft, the query
// server and its readiness, the write path (which runs while the node
// leads) and the listeners, then stops them in order. token is the admin
// token, read by run with the configuration.
func serve(ctx context.Context, c config, token string, log hclog.Logger) error {
	if os.Getenv(envAdminToken) != "" && c.tokenFile != "" {
		// Both set: the file is the token, as for eddy-ctl; say so, or a
		// variable left over from a rotation would look in force.
		log.Warn(envAdminToken+" is set and not read: the admin token is --admin-token-file's", "admin-token-file", c.tokenFile)
	}
	if c.store == "" {
		c.store = "file://" + filepath.Join(c.dataDir, "store")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(
		// Beside the defaults (go_gc_gomemlimit_bytes among them), the
		// heap the last collection found live: what --memory-limit cannot
		// take back.
		collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}),
	), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bucket, err := openStore(c.store, reg)
	if err != nil {
		return err
	}
	// Every read goes through the guard: while its probe (readiness,
	// every poll) finds the store unreachable, reads fail at once with
	// ErrUnavailable (queries answer 503 StoreUnavailable) and /readyz
	// says so, instead of every cold query waiting out the client's
	// retries to fail.
	store := objstore.NewGuard(bucket)
	var rs *restoreState
	var restore []byte
	if c.restoreFromBucket {
		// Refused here over existing state, before anything is put back
		// (cluster.Open would refuse it too, after).
		raftDir := filepath.Join(c.dataDir, "raft")
		has, err := cluster.HasState(raftDir)
		if err != nil {
			return fmt.Errorf("--restore-from-bucket: %w", err)
		}
		if has {
			return fmt.Errorf("--restore-from-bucket: %s already holds Raft state; a restore starts a new cluster in an empty data directory (remove the flag to start this node as it is)", raftDir)
		}
		if rs, err = stateToRestore(ctx, bucket); err != nil {
			return err
		}
		if err := rs.putBack(ctx, bucket); err != nil {
			return err
		}
		restore = rs.snapshot
	}
	if c.bootstrap && !c.restoreFromBucket {
		if err := checkBootstrap(ctx, bucket, filepath.Join(c.dataDir, "raft")); err != nil {
			return err
		}
	}
	checked, err := checkJoin(ctx, c, token, log)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil // stopped while it waited for the cluster's answer
	}
	node, err := cluster.Open(cluster.Config{
		ID: c.id, Dir: filepath.Join(c.dataDir, "raft"), RaftBind: c.raftAddr, RaftAdvertise: c.raftAdvertise,
		HTTPAddr: c.httpAdvertised(), AdminAddr: c.adminAdvertised(), SourceAddr: c.sourceAddr, Certs: cluster.Files(c.certsDir, c.id),
		Bootstrap: c.bootstrap, Restore: restore, Logger: log,
	})
	if err != nil {
		return err
	}
	if rs != nil {
		rs.logRestored(log)
	}
	log = log.With("node", node.ID())
	cat := lsm.NewCatalogMapped(filepath.Join(c.dataDir, "meta"), store)
	if c.metaCacheBytes != 0 {
		cat = lsm.NewCatalogBounded(filepath.Join(c.dataDir, "meta"), store, c.metaCacheBytes)
	}
	cat.OnDamaged = func(t lsm.Tree, id string, err error) {
		log.Warn("local table metadata damaged (check the disk): fetching it again from the bucket", "tree", t, "table", id, "error", err)
	}
	views := query.NewViews(node.FSM, cat, log)
	cache := lsm.NewFrameCache(c.cacheBytes)
	views.Cache = cache // a table compaction replaced leaves the cache with its metadata
	reader := lsm.NewReader(store, cache)
	reader.SetLargeReadMemory(c.largeReadMemory)
	// The PLC map of the served view renders inline did:plc (it is empty
	// on a cluster that never followed a directory: every DID outlined).
	plcMap := lsm.NewPLCMap(reader, lsm.Views(views.Current), 0)
	plcDir, _ := ingest.ParsePLCFlag(c.plc) // checked with the configuration
	// The names tree renders named record keys (link.Codec.RKey).
	names := lsm.NewNameMap(reader, lsm.Views(views.Current), 0)
	qs := query.NewServer(views, reader, &link.Codec{Outlines: node.FSM, PLC: plcMap, Names: names}, log)
	queryMetrics := query.NewMetrics()
	if err := queryMetrics.Register(reg); err != nil {
		return err
	}
	qs.Corrupt, views.Corrupt = queryMetrics.Corrupt, queryMetrics.Corrupt // eddy_corrupt_total{tree}
	qs.MissingTable = queryMetrics.MissingTable                            // eddy_query_missing_table_total
	qs.StoreUnavailable = queryMetrics.StoreUnavailable                    // eddy_query_store_unavailable_total
	qs.Busy = queryMetrics.Busy                                            // eddy_query_busy_total
	proxies, _ := query.ParseTrustedProxies(c.trustedProxies)              // checked with the configuration
	qs.Clients = query.NewClientLimiter(query.ClientLimits{Rate: c.clientRate, Burst: c.clientBurst, InFlight: c.clientInFlight, TrustedProxies: proxies, RefusalDelay: query.DefaultRefusalDelay, Slots: c.querySlots, SlotsPerClient: c.clientSlots, PaceGap: cmp.Or(c.clientPaceGap, -1), Conns: cmp.Or(c.clientConns, -1)})
	if qs.Clients != nil {
		reg.MustRegister(qs.Clients.Collectors()...)
	}
	reg.MustRegister(node.Metrics())
	reg.MustRegister(metaCacheCollectors(cat)...)
	reg.MustRegister(nodeCollectors(node, cache, reader, c.compactionFanIn)...)
	reg.MustRegister(dataDirCollector(c.dataDir))
	ready := newReadiness(node, views, c.readyLagMax, token, c.sourceAddr)
	views.Hold = ready.replaying // the manifests a restart replays are not opened
	ready.store, ready.log = store, log.Named("ready")
	reg.MustRegister(ready.collectors()...)
	qs.Ready = ready.caughtUp // one readiness decides /readyz and the queries' NotReady
	qs.Unsure = ready.unsure

	metrics := ingest.NewMetrics()
	if err := metrics.Register(reg); err != nil {
		return err
	}
	sources, err := parseSources(c.sources, log, metrics, node)
	if err != nil {
		return err
	}

	bg, cancelBg := context.WithCancel(context.Background())
	defer cancelBg()
	var wg sync.WaitGroup
	wg.Go(func() { views.Run(bg) })
	wg.Go(func() { ready.run(bg) })
	admin, err := cluster.NewAdmin(node, token)
	if err != nil {
		return err
	}
	admin.Extra = adminExtra(c, node, views, sources)
	admin.Served = views.OldestServed // what the leader's garbage collector waits for
	admin.StoreAnswers = store.Answering
	// eddy-ctl compact --full (forwarded to the leader): a replicated
	// request, carried out by whichever node leads.
	admin.Compact = ingest.AdminCompact(node)
	// eddy-ctl backfill restart: the same, for a crawl of every repository
	// again by the backfill sources.
	admin.BackfillRestart = ingest.AdminBackfillRestart(node, sources)
	admin.DropTables = ingest.AdminDropTables(node)
	// A compaction cut short by a crash left its spill (gigabytes at
	// scale): removed now, whatever this node's role.
	spillDir := filepath.Join(c.dataDir, "spill")
	if n, err := lsm.RemoveSpills(spillDir); err != nil {
		log.Warn("remove a cut-short compaction's spill", "error", err)
	} else if n > 0 {
		log.Info("removed a cut-short compaction's spill", "files", n)
	}
	// The write path runs while this node leads.
	writePath := &ingest.Supervisor{Node: node, Logger: log, Runner: ingest.Runner{Config: ingest.Config{
		Node: node, Store: store, Catalog: cat, FlushInterval: c.flushInterval, MemtableBytes: c.memtableBytes,
		Logger: log, Metrics: metrics, PLC: plcMap, PLCDirectory: plcDir, Corrupt: queryMetrics.Corrupt,
		GCGrace: c.gcGrace, Members: admin.MembersServed, StateBackupInterval: c.stateBackupInterval,
	}, Sources: sources, SpillDir: spillDir, CompactionFanIn: c.compactionFanIn, CompactionInterval: c.compactionInterval},
		StoreUp:          store.WhenUp,            // back from a bucket outage at the first probe that finds it answering
		PeerReachesStore: admin.VoterReachesStore} // an outage of this node's alone hands leadership over
	writePath.Start(bg)
	admin.Transfer = func(ctx context.Context) error { return writePath.HandOver(ctx, node.TransferLeadership) }
	servers := []*http.Server{
		// Idle keep-alive connections are closed after a while: each
		// counts against its client's --client-conns.
		{Addr: c.httpAddr, Handler: publicHandler(qs, queryMetrics, reg, ready), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: publicIdleTimeout},
		{Addr: c.adminAddr, Handler: admin.Handler(), ReadHeaderTimeout: 10 * time.Second},
	}
	errc, err := listen(servers, qs.Clients.Listener)
	if err != nil {
		node.Close(context.Background())
		return err
	}
	log.Info("node started", "version", version.Version, "raft", c.raftAddr, "admin", c.adminAddr, "http", c.httpAddr, "store", redactStore(c.store))
	refused := make(chan error, 1)
	if c.join != "" {
		wg.Go(func() {
			// Fresh while the node holds no Raft entry, asked again at each
			// try: a retried join that took effect (its answer lost) finds
			// the node a voter, and must not refuse it as a blank one. A
			// node the cluster took before Raft started is not fresh.
			fresh := func() bool { return !checked && node.Raft().LastIndex() == 0 }
			err := joinCluster(bg, log, strings.Split(c.join, ","), token, c.sourceAddr, joinRequest(c, node.ID()), fresh)
			switch {
			case err == nil:
			case refusalStops(node.HadState(), err):
				refused <- err
			default:
				log.Error("join refused; this node was a member already and goes on as one", "error", err)
			}
		})
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	case serveErr = <-refused: // a node the cluster will not take stops, rather than run outside it unseen
	}
	log.Info("stopping")
	// Stop ingest first (a leader publishes what it buffered), then hand
	// leadership away and stop Raft, then the listeners.
	writePath.Stop()
	cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := node.Close(cctx); err != nil {
		log.Warn("raft shutdown", "error", err)
	}
	for _, s := range servers {
		s.Shutdown(cctx)
	}
	cancelBg()
	wg.Wait()
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// openStore opens the object store at url, counted by metrics registered
// with reg.
func openStore(url string, reg prometheus.Registerer) (objstore.Store, error) {
	m := objstore.NewMetrics()
	if err := m.Register(reg); err != nil {
		return nil, err
	}
	store, err := objstore.OpenCounted(url, m)
	if err != nil {
		// The error may quote the URL: show it redacted.
		return nil, fmt.Errorf("--store %s: %s", redactStore(url), strings.ReplaceAll(err.Error(), url, redactStore(url)))
	}
	return store, nil
}

// parseSources makes the --source values into sources, watched by the
// ingest metrics.
func parseSources(raw []string, log hclog.Logger, metrics *ingest.Metrics, node *cluster.Node) ([]ingest.Source, error) {
	var sources []ingest.Source
	for _, s := range raw {
		src, err := ingest.ParseSource(s, log)
		if err != nil {
			return nil, err
		}
		metrics.Watch(src, node.FSM.Cursor)
		sources = append(sources, src)
	}
	return sources, nil
}

// adminExtra is what /admin/status adds to a node's status: the served
// generation, the store, and each source's state.
func adminExtra(c config, node *cluster.Node, views *query.Views, sources []ingest.Source) func() (uint64, map[string]any) {
	return func() (uint64, map[string]any) {
		v := views.Current()
		extra := map[string]any{"store": redactStore(c.store), "sources": len(sources)}
		done := map[string]bool{}
		for _, s := range sources {
			done[s.Name()] = ingest.Done(node.FSM.Cursor(s.Name()))
		}
		extra["sources_done"] = done
		extra["source_status"] = ingest.SourcesStatus(sources, node.FSM.Cursor, time.Now())
		extra["gc"] = gcStatus(node)
		if p := ingest.FullCompactionPending(node.FSM); len(p) > 0 {
			extra["full_compaction_pending"] = p // the trees a requested full compaction has not merged yet
		}
		if p := ingest.DropsPending(node.FSM); len(p) > 0 {
			extra["drops_pending"] = p // the tables drop requests ask for, by tree, not dropped yet
		}
		return v.Generation(), extra
	}
}

// publicHandler serves the public HTTP address: the query API, /metrics,
// /healthz and /readyz.
func publicHandler(qs *query.Server, queryMetrics *query.Metrics, reg *prometheus.Registry, ready *readiness) http.Handler {
	pub := http.NewServeMux()
	pub.Handle("/", queryMetrics.Wrap(qs.Handler())) // the query API: /xrpc/…, /links…, the index page, and JSON 404s for the rest
	// Any method, so that one but GET or HEAD is a 405 as in the query API,
	// not the query mux's 404.
	pub.Handle("/metrics", query.GetOnly(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	pub.Handle("/healthz", query.GetOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })))
	pub.Handle("/readyz", query.GetOnly(http.HandlerFunc(ready.handler)))
	return pub
}

// publicIdleTimeout closes the query API's idle keep-alive connections.
const publicIdleTimeout = 90 * time.Second

// listen starts serving each server on its address, the first's listener
// (the query API's) through public (its per-client connection bound); the
// channel receives the error each one ends with.
func listen(servers []*http.Server, public func(net.Listener) net.Listener) (<-chan error, error) {
	errc := make(chan error, len(servers))
	for i, s := range servers {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", s.Addr, err)
		}
		if i == 0 && public != nil {
			ln = public(ln)
		}
		go func() { errc <- s.Serve(ln) }()
	}
	return errc, nil
}

// refusalStops says whether the cluster's refusal of a --join stops the
// node: always for a new node; for one that was a member already (Raft
// state of its own) only if the cluster removed it (403 Removed), not
// for a refused token (a token rotation half done) nor a proxy's 403.
func refusalStops(wasMember bool, err error) bool {
	var ce *cluster.CallError
	return !wasMember || errors.As(err, &ce) && ce.Status == http.StatusForbidden && ce.Name == "Removed"
}

// advertised is the address other nodes and operators are told for a
// listener bound at bind: bind itself, but for a host that names every
// interface (0.0.0.0, ::, none: the env example's public API), which
// would send a peer's readiness poll, eddy-ctl status or roll to
// themselves; that host is then the one Raft advertises, which peers dial.
// --admin-advertise and --http-advertise, when set, are told instead.
func advertised(bind string, c config) string {
	host, port, err := net.SplitHostPort(bind)
	if err != nil {
		return bind
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return bind
	}
	rhost, _, err := net.SplitHostPort(orStr(c.raftAdvertise, c.raftAddr))
	if ip := net.ParseIP(rhost); err != nil || rhost == "" || ip != nil && ip.IsUnspecified() {
		return bind
	}
	return net.JoinHostPort(rhost, port)
}

// adminAdvertised and httpAdvertised are the addresses this node's
// admin and public listeners are known by (advertised).
func (c config) adminAdvertised() string { return orStr(c.adminAdvertise, advertised(c.adminAddr, c)) }
func (c config) httpAdvertised() string  { return orStr(c.httpAdvertise, advertised(c.httpAddr, c)) }

// joinRequest is this node's join.
func joinRequest(c config, id string) cluster.JoinRequest {
	req := cluster.JoinRequest{ID: id, Raft: orStr(c.raftAdvertise, c.raftAddr), Admin: c.adminAdvertised(), HTTP: c.httpAdvertised()}
	if c.nonvoter {
		req.Suffrage = cluster.SuffrageNonvoter // a new member's; a member keeps its own
	}
	return req
}

// checkJoin asks the cluster, before Raft starts, whether it takes a node
// that has no Raft state (a new node, or one whose data directory was
// lost) and is started with --join: one that lost its data under a voter's
// ID would otherwise vote as a blank voter (cluster.JoinRequest, Fresh)
// while its join waits. It waits while the cluster cannot answer (no
// listener runs meanwhile: the log says so), and returns the cluster's
// refusal; checked says the cluster took it.
func checkJoin(ctx context.Context, c config, token string, log hclog.Logger) (checked bool, _ error) {
	if c.join == "" || c.bootstrap || c.restoreFromBucket || c.id == "" { // no ID: a new one, no voter's
		return false, nil
	}
	has, err := cluster.HasState(filepath.Join(c.dataDir, "raft"))
	if err != nil || has {
		return false, err
	}
	req := joinRequest(c, c.id)
	req.Fresh, req.Check = true, true
	log.Info("no Raft state: asking the cluster whether it takes this node before starting Raft (nothing listens until it answers)", "join", c.join)
	if err := joinCluster(ctx, log, strings.Split(c.join, ","), token, c.sourceAddr, req, nil); err != nil {
		return false, err
	}
	return ctx.Err() == nil, nil
}

// joinBackoff: the waits between attempts to join the cluster.
var joinBackoff = backoff.Policy{Min: 200 * time.Millisecond, Max: 5 * time.Second}

// joinCluster asks the cluster to add this node, retrying until it
// succeeds (a no-op if already a member) or the node stops; the cluster's
// refusal (a removed ID, a wrong token: an answer below 500) is returned.
// fresh, if set, is asked for req.Fresh at each try.
func joinCluster(ctx context.Context, log hclog.Logger, addrs []string, token, source string, req cluster.JoinRequest, fresh func() bool) error {
	cl := cluster.AdminClient{Addrs: addrs, Token: token}
	if hc, err := cluster.HTTPClient(source, 15*time.Second); err == nil {
		cl.HTTP = hc
	}
	var wait time.Duration
	for {
		if fresh != nil {
			req.Fresh = fresh()
		}
		body, err := json.Marshal(req)
		if err != nil {
			return fmt.Errorf("join request: %w", err)
		}
		err = cl.Call(ctx, http.MethodPost, "/admin/join", body, nil)
		if err == nil && req.Check {
			log.Info("the cluster takes this node", "via", strings.Join(addrs, ","))
			return nil
		}
		if err == nil {
			log.Info("joined the cluster", "via", strings.Join(addrs, ","))
			return nil
		}
		var ce *cluster.CallError
		if errors.As(err, &ce) && ce.Status < 500 {
			return fmt.Errorf("join refused by the cluster (--join %s): %w", strings.Join(addrs, ","), err)
		}
		wait = joinBackoff.Next(wait)
		log.Warn("join failed; retrying", "error", err, "backoff", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func orStr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
