// Command eddy-node runs one node of an Eddy cluster: a Raft member that
// serves queries from the manifest it has applied and, while it leads,
// ingests the configured sources.
//
// Every flag has an environment variable (EDDY_ and the flag name in upper
// case with '-' as '_'); secrets (the admin token, S3 keys) come only from
// files or the environment, never from flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

type config struct {
	id, dataDir, raftAddr, raftAdvertise, adminAddr, httpAddr string
	bootstrap                                                 bool
	join                                                      string
	certsDir, tokenFile, store, plc, logLevel                 string
	sources                                                   listFlag
	flushInterval, readyLagMax                                time.Duration
	memtableBytes                                             int
	cacheBytes                                                int64
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var c config
	fs := flag.NewFlagSet("eddy-node", flag.ContinueOnError)
	fs.StringVar(&c.id, "id", "", "node ID (persisted in the data directory at first start; must match after)")
	fs.StringVar(&c.dataDir, "data-dir", "", "data directory: Raft log and snapshots, table metadata (required)")
	fs.StringVar(&c.raftAddr, "raft-addr", "127.0.0.1:7000", "Raft listen address (mutual TLS)")
	fs.StringVar(&c.raftAdvertise, "raft-advertise", "", "Raft address peers dial (default: --raft-addr)")
	fs.StringVar(&c.adminAddr, "admin-addr", "127.0.0.1:7001", "admin API listen address (join, status; token required)")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "public query API listen address")
	fs.BoolVar(&c.bootstrap, "bootstrap", false, "form a new cluster of this node if it has no state (ignored when it has)")
	fs.StringVar(&c.join, "join", "", "admin addresses of cluster members to join through at start (comma-separated); a no-op when already a member")
	fs.StringVar(&c.certsDir, "certs-dir", "", "directory of ca.pem, <id>.pem, <id>-key.pem (eddy-ctl certs) (required)")
	fs.StringVar(&c.tokenFile, "admin-token-file", "", "file holding the admin bearer token (or EDDY_ADMIN_TOKEN) (required)")
	fs.StringVar(&c.store, "store", "", "object store URL shared by every node: file:///dir or s3://bucket/prefix?endpoint=host:port (default: file://<data-dir>/store)")
	fs.Var(&c.sources, "source", "ingest source, repeatable: replay+file:///path, jetstream+wss://host/subscribe, firehose+wss://host")
	fs.StringVar(&c.plc, "plc", "off", "DID source: off (every DID outlined through Raft), or the URL of a PLC directory whose /export the leader follows into the PLC map")
	fs.DurationVar(&c.flushInterval, "flush-interval", ingest.DefaultFlushInterval, "longest time an ingested operation waits before its flush starts")
	fs.IntVar(&c.memtableBytes, "memtable-bytes", ingest.DefaultMemtableBytes, "memory bound of each memtable (backlinks, revocations)")
	fs.Int64Var(&c.cacheBytes, "cache-bytes", lsm.DefaultCacheBytes, "bound of the decoded-frame cache")
	fs.DurationVar(&c.readyLagMax, "ready-lag-max", 30*time.Second, "/readyz fails when the served manifest is older than the applied one for longer than this")
	fs.StringVar(&c.logLevel, "log-level", "info", "trace, debug, info, warn, error")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.VisitAll(func(f *flag.Flag) {
		env := "EDDY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		f.Usage += " [$" + env + "]"
		if v, ok := os.LookupEnv(env); ok && f.Name != "version" {
			fs.Set(f.Name, v)
		}
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Println(version.Version)
		return 0
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "eddy", Level: hclog.LevelFromString(c.logLevel), JSONFormat: false, Output: os.Stderr})
	if err := c.validate(); err != nil {
		log.Error("invalid configuration", "error", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, c, log); err != nil {
		log.Error("node stopped", "error", err)
		return 1
	}
	return 0
}

func (c *config) validate() error {
	if c.dataDir == "" {
		return errors.New("--data-dir is required")
	}
	if c.id == "" {
		return errors.New("--id is required (it names the node's certificate)")
	}
	if c.certsDir == "" {
		return errors.New("--certs-dir is required (eddy-ctl certs makes one)")
	}
	if c.tokenFile == "" && os.Getenv("EDDY_ADMIN_TOKEN") == "" {
		return errors.New("--admin-token-file (or EDDY_ADMIN_TOKEN) is required")
	}
	for _, a := range []struct{ name, v string }{{"--raft-addr", c.raftAddr}, {"--admin-addr", c.adminAddr}, {"--http-addr", c.httpAddr}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%s %q: %v", a.name, a.v, err)
		}
	}
	if _, err := ingest.ParsePLCFlag(c.plc); err != nil {
		return err
	}
	if c.flushInterval < 50*time.Millisecond || c.flushInterval > 10*time.Minute {
		return fmt.Errorf("--flush-interval %v: out of range 50ms..10m", c.flushInterval)
	}
	if c.memtableBytes < 1<<20 || c.memtableBytes > 4<<30 {
		return fmt.Errorf("--memtable-bytes %d: out of range 1 MiB..4 GiB", c.memtableBytes)
	}
	for _, s := range c.sources {
		if _, err := ingest.ParseSource(s, nil); err != nil {
			return fmt.Errorf("--source: %w", err)
		}
	}
	return nil
}

func adminToken(c config) (string, error) {
	if t := os.Getenv("EDDY_ADMIN_TOKEN"); t != "" {
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
		return fmt.Errorf("--store: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counted := objstore.Counting(store)

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
	reader := lsm.NewReader(counted, lsm.NewFrameCache(c.cacheBytes))
	// The PLC map of the served view renders inline did:plc (it is empty
	// on a cluster that never followed a directory: every DID outlined).
	plcMap := lsm.NewPLCMap(reader, lsm.Views(views.Current), 0)
	plcDir, _ := ingest.ParsePLCFlag(c.plc)
	codec := &link.Codec{Outlines: node.FSM, PLC: plcMap}
	qs := query.NewServer(views, reader, codec, log)
	// A restarted node answers queries only once it has applied the log it
	// had at start (or readyLagMax passed) and serves the manifest applied.
	startIndex, started := node.Raft().LastIndex(), time.Now()
	var caughtUp atomic.Bool
	qs.Ready = func() error {
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
		caughtUp.Store(true)
		return nil
	}

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
		sources = append(sources, src)
	}

	bg, cancelBg := context.WithCancel(context.Background())
	defer cancelBg()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); views.Run(bg) }()

	// The write path runs while this node leads.
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
			r := &ingest.Runner{Config: ingest.Config{
				Node: node, Store: counted, Catalog: cat, FlushInterval: c.flushInterval, MemtableBytes: c.memtableBytes,
				Logger: log, Metrics: metrics, PLC: plcMap, PLCDirectory: plcDir,
			}, Sources: sources}
			if err := r.Run(lctx); err != nil && lctx.Err() == nil {
				log.Warn("write path ended", "error", err)
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
	pub.Handle("/xrpc/", qs.Handler())
	pub.Handle("/links/", qs.Handler())
	pub.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	pub.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	pub.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		applied := node.FSM.Manifest().Generation
		served := views.Current().Generation()
		if served < applied && time.Since(views.AppliedAt()) > c.readyLagMax {
			http.Error(w, fmt.Sprintf("serving generation %d, applied %d", served, applied), http.StatusServiceUnavailable)
			return
		}
		if _, leader := node.Leader(); leader == "" {
			http.Error(w, "no leader known", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready: generation %d\n", served)
	})
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

// redactStore drops a URL's query (which may name credential files).
func redactStore(s string) string {
	if i := strings.IndexByte(s, '?'); i >= 0 {
		return s[:i]
	}
	return s
}
