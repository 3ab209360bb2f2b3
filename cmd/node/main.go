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
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/fsm"
	"github.com/eddy-backlinks/eddy/ingest"
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
	log.SetLevel(hclog.LevelFromString(c.logLevel))
	log.Info("configuration", c.logged()...)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *c, log); err != nil {
		log.Error("node stopped", "error", err)
		return 1
	}
	return 0
}

func adminToken(c config) (string, error) {
	if t := os.Getenv(envAdminToken); t != "" {
		return strings.TrimSpace(t), nil
	}
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func serve(ctx context.Context, c config, log hclog.Logger) error {
	token, err := adminToken(c)
	if err != nil {
		return err
	}
	if c.store == "" {
		c.store = "file://" + filepath.Join(c.dataDir, "store")
	}
	store, err := objstore.Open(c.store)
	if err != nil {
		// The error may quote the URL: show it redacted.
		return fmt.Errorf("--store %s: %s", redactStore(c.store), strings.ReplaceAll(err.Error(), c.store, redactStore(c.store)))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	storeMetrics := objstore.NewMetrics()
	if err := storeMetrics.Register(reg); err != nil {
		return err
	}
	counted := objstore.Instrument(store, storeMetrics)

	id := c.id
	node, err := cluster.Open(cluster.Config{
		ID: id, Dir: filepath.Join(c.dataDir, "raft"), RaftBind: c.raftAddr, RaftAdvertise: c.raftAdvertise,
		HTTPAddr: c.httpAddr, AdminAddr: c.adminAddr, Certs: cluster.Files(c.certsDir, id),
		Bootstrap: c.bootstrap, Logger: log,
	})
	if err != nil {
		return err
	}
	log = log.With("node", node.ID())
	cat := lsm.NewCatalog(filepath.Join(c.dataDir, "meta"), counted)
	views := query.NewViews(node.FSM, cat, log)
	cache := lsm.NewFrameCache(c.cacheBytes)
	reader := lsm.NewReader(counted, cache)
	// The PLC map of the served view renders inline did:plc (it is empty
	// on a cluster that never followed a directory: every DID outlined).
	plcMap := lsm.NewPLCMap(reader, lsm.Views(views.Current), 0)
	plcDir, _ := ingest.ParsePLCFlag(c.plc) // checked with the configuration
	codec := &link.Codec{Outlines: node.FSM, PLC: plcMap}
	qs := query.NewServer(views, reader, codec, log)
	queryMetrics := query.NewMetrics()
	if err := queryMetrics.Register(reg); err != nil {
		return err
	}
	reg.MustRegister(node.Metrics())
	reg.MustRegister(nodeCollectors(node, cache)...)
	ready := newReadiness(node, views, c.readyLagMax, token)
	reg.MustRegister(ready.collectors()...)
	// A restarted node answers queries only once it has applied the log it
	// had at start and what the leader made committed since (or
	// readyLagMax passed);
	// from then on it always answers (an election later does not stop it).
	// The condition is watched in the background (below), so a node that
	// caught up before any query came is not refused by a later election.
	startIndex, started := node.Raft().LastIndex(), time.Now()
	var caughtUp atomic.Bool
	catchUp := func() error {
		if caughtUp.Load() {
			return nil
		}
		if _, leader := node.Leader(); leader == "" {
			return errors.New("no leader known")
		}
		if a := node.Raft().AppliedIndex(); a < startIndex && time.Since(started) < c.readyLagMax {
			return fmt.Errorf("applied log index %d of %d", a, startIndex)
		}
		if served, applied := views.Current().Generation(), node.FSM.Manifest().Generation; served < applied {
			return fmt.Errorf("serving generation %d, applied %d", served, applied)
		}
		// The log it had at start may end before generations the leader
		// published meanwhile (a node down for a while): a follower must
		// have heard from the leader since it started and applied what
		// that made committed.
		if !node.IsLeader() && time.Since(started) < c.readyLagMax {
			r := node.Raft()
			if r.LastContact().Before(started) {
				return errors.New("not heard from the leader since start")
			}
			if a, ci := r.AppliedIndex(), r.CommitIndex(); a < ci {
				return fmt.Errorf("applied log index %d of %d committed", a, ci)
			}
			if served, applied := views.Current().Generation(), node.FSM.Manifest().Generation; served < applied {
				return fmt.Errorf("serving generation %d, applied %d", served, applied)
			}
		}
		caughtUp.Store(true)
		return nil
	}
	qs.Ready = catchUp

	var sources []ingest.Source
	metrics := ingest.NewMetrics()
	if err := metrics.Register(reg); err != nil {
		return err
	}
	for _, s := range c.sources {
		src, err := ingest.ParseSource(s, log)
		if err != nil {
			return err
		}
		metrics.Watch(src, node.FSM.Cursor)
		sources = append(sources, src)
	}

	bg, cancelBg := context.WithCancel(context.Background())
	defer cancelBg()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); views.Run(bg) }()
	wg.Add(1)
	go func() { defer wg.Done(); ready.run(bg) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for catchUp() != nil {
			select {
			case <-bg.Done():
				return
			case <-t.C:
			}
		}
	}()

	// The write path runs while this node leads.
	const (
		writePathHealthy     = 5 * time.Minute // a run this long resets the failure count
		writePathBackoffMax  = 30 * time.Second
		writePathFailuresMax = 3 // in a row, before handing leadership over
	)
	var leadMu sync.Mutex
	var stopLead context.CancelFunc
	var leadDone chan struct{}
	node.OnLeadership(func(is bool) {
		leadMu.Lock()
		defer leadMu.Unlock()
		if stopLead != nil {
			stopLead()
			<-leadDone
			stopLead = nil
		}
		if !is || len(sources) == 0 {
			return
		}
		lctx, cancel := context.WithCancel(bg)
		done := make(chan struct{})
		stopLead, leadDone = cancel, done
		go func() {
			defer close(done)
			// A write path that fails while this node still leads (a store
			// refusing writes, a table failing its check) starts again from
			// the committed state after a backoff; past a few failures in a
			// row the node hands leadership to another, which may fare
			// better, rather than lead with no ingest.
			for failures := 0; ; {
				r := &ingest.Runner{Config: ingest.Config{
					Node: node, Store: counted, Catalog: cat, FlushInterval: c.flushInterval, MemtableBytes: c.memtableBytes,
					Logger: log, Metrics: metrics, PLC: plcMap, PLCDirectory: plcDir,
				}, Sources: sources}
				started := time.Now()
				err := r.Run(lctx)
				if lctx.Err() != nil || !node.IsLeader() {
					return
				}
				if time.Since(started) > writePathHealthy {
					failures = 0
				}
				failures++
				wait := min(writePathBackoffMax, time.Second<<min(failures-1, 5))
				log.Error("write path ended while leading; starting it again from the committed state", "error", err, "failures_in_a_row", failures, "retry_in", wait)
				if failures >= writePathFailuresMax {
					log.Error("write path keeps failing on this node: handing leadership over", "failures_in_a_row", failures)
					tctx, tcancel := context.WithTimeout(lctx, 10*time.Second)
					if err := node.TransferLeadership(tctx); err != nil {
						log.Warn("leadership transfer", "error", err)
					}
					tcancel()
				}
				select {
				case <-lctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}()
	})

	admin, err := cluster.NewAdmin(node, token)
	if err != nil {
		return err
	}
	admin.Extra = func() (uint64, map[string]any) {
		v := views.Current()
		extra := map[string]any{"store": redactStore(c.store), "sources": len(sources)}
		done := map[string]bool{}
		for _, s := range sources {
			done[s.Name()] = ingest.Done(node.FSM.Cursor(s.Name()))
		}
		extra["sources_done"] = done
		extra["source_status"] = ingest.SourcesStatus(sources, node.FSM.Cursor, time.Now())
		return v.Generation(), extra
	}

	pub := http.NewServeMux()
	api := queryMetrics.Wrap(qs.Handler())
	pub.Handle("/", api) // the query API: /xrpc/…, /links…, the index page, and JSON 404s for the rest
	pub.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	pub.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	pub.HandleFunc("GET /readyz", ready.handler)
	servers := []*http.Server{
		{Addr: c.httpAddr, Handler: pub, ReadHeaderTimeout: 10 * time.Second},
		{Addr: c.adminAddr, Handler: admin.Handler(), ReadHeaderTimeout: 10 * time.Second},
	}
	errc := make(chan error, len(servers))
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			node.Close(context.Background())
			return fmt.Errorf("listen %s: %w", s.Addr, err)
		}
		go func() { errc <- s.Serve(ln) }()
	}
	log.Info("node started", "version", version.Version, "raft", c.raftAddr, "admin", c.adminAddr, "http", c.httpAddr, "store", redactStore(c.store))

	if c.join != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			joinCluster(bg, log, strings.Split(c.join, ","), token, fsm.NodeInfo{
				ID: node.ID(), Raft: orStr(c.raftAdvertise, c.raftAddr), Admin: c.adminAddr, HTTP: c.httpAddr,
			})
		}()
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	log.Info("stopping")
	// Stop ingest first (a leader publishes what it buffered), then hand
	// leadership away and stop Raft, then the listeners.
	leadMu.Lock()
	if stopLead != nil {
		stopLead()
		<-leadDone
		stopLead = nil
	}
	leadMu.Unlock()
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

// joinCluster asks the cluster to add this node, retrying until it
// succeeds (a no-op if already a member) or the node stops.
func joinCluster(ctx context.Context, log hclog.Logger, addrs []string, token string, info fsm.NodeInfo) {
	body := fmt.Sprintf(`{"id":%q,"raft":%q,"admin":%q,"http":%q}`, info.ID, info.Raft, info.Admin, info.HTTP)
	cl := cluster.AdminClient{Addrs: addrs, Token: token}
	backoff := 200 * time.Millisecond
	for {
		err := cl.Call(ctx, http.MethodPost, "/admin/join", []byte(body), nil)
		if err == nil {
			log.Info("joined the cluster", "via", strings.Join(addrs, ","))
			return
		}
		var ce *cluster.CallError
		if errors.As(err, &ce) && ce.Status < 500 {
			log.Error("join refused", "error", err)
			return
		}
		log.Warn("join failed; retrying", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(5*time.Second, backoff*2)
	}
}

func orStr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
