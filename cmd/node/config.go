package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/eddy-backlinks/eddy/query"
)

// Configuration comes from four layers, highest first: command-line flags,
// environment variables (one per flag: EDDY_ and the flag's name in upper
// case with '-' as '_'), the --config file (EDDY_CONFIG), and the defaults.
// Secrets never come from a flag or the config file: the admin token from
// --admin-token-file or EDDY_ADMIN_TOKEN, S3 keys from files named in the
// --store URL or EDDY_S3_ACCESS_KEY / EDDY_S3_SECRET_KEY, TLS keys from
// --certs-dir.

// Environment variables that are not options.
const (
	envConfig     = "EDDY_CONFIG"
	envAdminToken = cluster.EnvAdminToken
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

type config struct {
	id, dataDir, raftAddr, raftAdvertise, adminAddr, httpAddr string
	adminAdvertise, httpAdvertise                             string
	sourceAddr                                                string
	bootstrap, nonvoter, restoreFromBucket                    bool
	join                                                      string
	certsDir, tokenFile, store, plc, logLevel                 string
	memoryLimit                                               string
	sources                                                   listFlag
	flushInterval, readyLagMax                                time.Duration
	gcGrace, compactionInterval, stateBackupInterval          time.Duration
	memtableBytes, compactionFanIn                            int
	cacheBytes, metaCacheBytes, largeReadMemory               int64
	clientRate                                                float64
	clientBurst, clientInFlight, querySlots                   int
	clientSlots                                               int
	clientPaceGap                                             time.Duration
	clientConns                                               int
	trustedProxies                                            string
	configFile                                                string
	showVersion                                               bool

	// origin of each option's value: "flag", "env", "file" or "default".
	origin map[string]string
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return "EDDY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// notFromEnvOrFile: flags that only the command line sets.
var notFromEnvOrFile = map[string]bool{"version": true, "config": true}

// secretKeys are names refused in the config file, with where the secret
// goes instead.
var secretKeys = map[string]string{
	"admin-token":   "--admin-token-file or " + envAdminToken,
	"token":         "--admin-token-file or " + envAdminToken,
	"s3-access-key": "access_key_file in the --store URL, or " + objstore.EnvS3AccessKey,
	"s3-secret-key": "secret_key_file in the --store URL, or " + objstore.EnvS3SecretKey,
	"access-key":    "access_key_file in the --store URL, or " + objstore.EnvS3AccessKey,
	"secret-key":    "secret_key_file in the --store URL, or " + objstore.EnvS3SecretKey,
}

func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("eddy-node", flag.ContinueOnError)
	fs.StringVar(&c.configFile, "config", "", "config `FILE` of name = value lines, one option a line (see docs/operations.md)")
	fs.StringVar(&c.id, "id", "", "node ID, letters, digits, '.', '_', '-' (persisted in the data directory at first start; must match after) (required)")
	fs.StringVar(&c.dataDir, "data-dir", "", "data directory: Raft log and snapshots, table metadata (required)")
	fs.StringVar(&c.raftAddr, "raft-addr", "127.0.0.1:7000", "Raft listen address host:port (mutual TLS)")
	fs.StringVar(&c.raftAdvertise, "raft-advertise", "", "Raft address host:port peers dial (default: --raft-addr)")
	fs.StringVar(&c.sourceAddr, "source-addr", "", "local IP this node's connections to its peers (Raft, admin calls) leave from, e.g. to keep cluster traffic on one interface or address (default: the system's choice)")
	fs.StringVar(&c.adminAddr, "admin-addr", "127.0.0.1:7001", "admin API listen address host:port (join, status; token required)")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "public query API listen address host:port (also /metrics, /healthz, /readyz)")
	fs.StringVar(&c.adminAdvertise, "admin-advertise", "", "admin API address host:port peers and eddy-ctl are told (default: --admin-addr, or for a listener bound to every interface its port at --raft-advertise's host; set it behind a NAT or port forward)")
	fs.StringVar(&c.httpAdvertise, "http-advertise", "", "public query API address host:port eddy-ctl status and roll are told (default: --http-addr, or for a listener bound to every interface its port at --raft-advertise's host)")
	fs.BoolVar(&c.bootstrap, "bootstrap", false, "form a new cluster of this node if it has no state (ignored when it has)")
	fs.BoolVar(&c.restoreFromBucket, "restore-from-bucket", false, "with an empty data directory: form a new one-node cluster whose replicated state (manifest, outlines, cursors) is the newest backup the leaders put in the bucket under state/, after all the nodes' data directories were lost; refused if the data directory holds Raft state or if a table the backup names is missing (docs/operations.md)")
	fs.StringVar(&c.join, "join", "", "admin addresses host:port of cluster members to join through at start (comma-separated); a no-op when already a member")
	fs.BoolVar(&c.nonvoter, "nonvoter", false, "with --join: join as a non-voter, a query node that serves every endpoint but never votes, leads or counts for quorum (a member keeps its suffrage; eddy-ctl join --voter/--nonvoter changes it)")
	fs.StringVar(&c.certsDir, "certs-dir", "", "directory of ca.pem, <id>.pem, <id>-key.pem (eddy-ctl certs) (required)")
	fs.StringVar(&c.tokenFile, "admin-token-file", "", "file holding the admin bearer token; or the token itself in "+envAdminToken+" (one of the two required)")
	fs.StringVar(&c.store, "store", "", "object store URL shared by every node: file:///dir or s3://bucket/prefix?endpoint=host:port&access_key_file=F&secret_key_file=F (default: file://<data-dir>/store)")
	fs.Var(&c.sources, "source", "ingest source, repeatable (in the environment: several separated by spaces): replay+file:///path, jetstream+wss://host/subscribe[,wss://failover/subscribe], firehose+wss://host, jetstream2+https://host, backfill+https://relay?plc=https://plc")
	fs.StringVar(&c.plc, "plc", "off", "DID source: off (every DID outlined through Raft), or the URL of a PLC directory whose /export the leader follows into the PLC map")
	fs.DurationVar(&c.flushInterval, "flush-interval", ingest.DefaultFlushInterval, "longest time an ingested operation waits before its flush starts (50ms..10m)")
	fs.IntVar(&c.memtableBytes, "memtable-bytes", ingest.DefaultMemtableBytes, "memory bound of each memtable, bytes (1 MiB..4 GiB)")
	fs.DurationVar(&c.gcGrace, "gc-grace", lsm.DefaultGCGrace, "how long a table that left the manifest, or an object under tables/ no manifest names, stays in the bucket before the leader deletes it (once every member serves past it); must exceed the longest compaction (1s..24h; below 1m for tests only)")
	fs.DurationVar(&c.stateBackupInterval, "state-backup-interval", ingest.DefaultStateBackupInterval, "how often the leader puts a backup of the replicated state in the bucket (state/), besides before deleting replaced tables; looked at with the leader's garbage collection (every quarter of --gc-grace, within 100ms..30s), so no more often than that; what a cluster restored from it (--restore-from-bucket) reads again from its sources (100ms..24h)")
	fs.IntVar(&c.compactionFanIn, "compaction-fan-in", lsm.DefaultCompactionFanIn, "flushes (delta runs) of a size tier merged by one compaction (2..64); merged runs are merged twice as many at a time")
	fs.DurationVar(&c.compactionInterval, "compaction-interval", 5*time.Second, "how often the leader looks for a merge due (100ms..1h)")
	fs.Int64Var(&c.cacheBytes, "cache-bytes", lsm.DefaultCacheBytes, "bound of the decoded-frame cache, bytes (1 MiB..1 TiB)")
	fs.Int64Var(&c.largeReadMemory, "large-read-memory", lsm.DefaultLargeReadMemory, "bound of the memory that reads of large targets hold at once, bytes (counts and folded answers, such as DID lists, of targets of more than ~65,000 links between each run's first and last frame: 128 bytes a link planned, twice for a full window of ~1M links, one read at most all of it; the others wait their turn without an execution slot, answering 503 Busy if their query's time runs out); 0: no bound (1 MiB..1 TiB, or 0)")
	fs.StringVar(&c.memoryLimit, "memory-limit", "auto", "soft limit of the Go runtime's memory, bytes (64 MiB..1 TiB; over GOMEMLIMIT): the collector works harder as the heap nears it instead of letting it grow to twice what is live; auto: GOMEMLIMIT if the environment sets it, else 3/4 of the memory the node may use (its cgroup's limit, else the machine's), at least 64 MiB; off: none (over GOMEMLIMIT too)")
	fs.Int64Var(&c.metaCacheBytes, "meta-cache-bytes", 0, "0: table metadata is read in place from its files in the data directory (mapped; the page cache holds what is hot); else the bound of a cache of decoded metadata, bytes (1 MiB..1 TiB; the rest decoded again from the data directory)")
	fs.DurationVar(&c.readyLagMax, "ready-lag-max", 30*time.Second, "/readyz answers 503 when this node has not heard from the leader, or has not served a manifest generation the leader had, for longer than this (500ms..1h)")
	fs.Float64Var(&c.clientRate, "client-rate", query.DefaultClientRate, "queries a second one client (an IPv4 address, an IPv6 /64, or the address a --trusted-proxies proxy forwards) may make of this node, sustained, a query counting once per 100 links of its limit; past it 429 RateLimitExceeded with Retry-After (0: no bound; 0..1000000)")
	fs.IntVar(&c.clientBurst, "client-burst", query.DefaultClientBurst, "queries one client idle for a while may make at once, past --client-rate (1..10000000)")
	fs.IntVar(&c.clientInFlight, "client-in-flight", query.DefaultClientInFlight, fmt.Sprintf("queries one client may have this node answer at once (0: no bound but the node's %d; 0..%d)", query.ConcurrentQueriesMax, query.ConcurrentQueriesMax))
	fs.DurationVar(&c.clientPaceGap, "client-pace-gap", query.DefaultPaceGap, "while other clients use this node, the least time between one of a client's queries leaving its execution slot (or starting) and the next starting, so that a client sending many at once does not run them back to back ahead of the others' requests (0: none; 0..10ms)")
	fs.IntVar(&c.clientConns, "client-conns", query.DefaultClientConns, "connections one client may keep open to the query API; past it a new connection is answered 429 unread and closed (0: no bound; 0..100000)")
	fs.IntVar(&c.clientSlots, "client-slots", 0, "execution slots one client's queries hold at once, so that a flooding client never has every CPU (0: a quarter of --query-slots, at least 1)")
	fs.IntVar(&c.querySlots, "query-slots", 0, fmt.Sprintf("queries executing at once, the others waiting their client's turn (0: %d per CPU; a query waiting for the bucket holds its slot, so raise it for a far bucket and cold queries; 0..%d)", query.DefaultSlotsPerCPU, query.ConcurrentQueriesMax))
	fs.StringVar(&c.trustedProxies, "trusted-proxies", "127.0.0.0/8,::1", "reverse proxies (addresses and CIDR prefixes, comma-separated) whose X-Forwarded-For names the client the limits count; any other peer is its own client")
	fs.StringVar(&c.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.BoolVar(&c.showVersion, "version", false, "print the version and exit")
	return fs
}

// usage writes --help: every option with its default and environment
// variable, then the secrets and the precedence.
func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: eddy-node [options]\n\n")
	fmt.Fprintf(w, "Runs one node of an Eddy cluster. Every option is a flag, an environment variable\n")
	fmt.Fprintf(w, "(shown in brackets) or a \"name = value\" line of the --config file; a flag wins over\n")
	fmt.Fprintf(w, "the environment, which wins over the file, which wins over the default.\n\nOptions:\n")
	fs.VisitAll(func(f *flag.Flag) {
		typ, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		env := "[$" + envName(f.Name) + "]"
		switch f.Name {
		case "version":
			env = ""
		case "config":
			env = "[$" + envConfig + "]"
		}
		def := f.DefValue
		if def == "" || f.Name == "source" {
			def = "none"
		}
		if f.Name == "version" || f.Name == "bootstrap" || f.Name == "nonvoter" || f.Name == "restore-from-bucket" {
			def = ""
		}
		fmt.Fprintf(w, "%s  %s\n      %s", line, env, help)
		if def != "" && !strings.Contains(help, "(default:") && !strings.Contains(help, "(required") {
			fmt.Fprintf(w, " (default: %s)", def)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprintf(w, `
Secrets come only from files or the environment, never from flags or the config file,
and are never logged:
  %-20s the admin bearer token itself (else --admin-token-file)
  %-20s S3 access key, when --store names no access_key_file (else AWS_ACCESS_KEY_ID)
  %-20s S3 secret key, when --store names no secret_key_file (else AWS_SECRET_ACCESS_KEY)
  %-20s a Jetstream v2 source's API key, when its URL names no api_key_file
  --certs-dir          the node's TLS key is <certs-dir>/<id>-key.pem
`, envAdminToken, objstore.EnvS3AccessKey, objstore.EnvS3SecretKey, ingest.EnvJetstreamAPIKey)
}

// parseConfig reads the configuration from args, the environment (getenv)
// and the config file. stdout receives --help.
func parseConfig(args []string, getenv func(string) (string, bool), stdout io.Writer) (*config, error) {
	c := &config{origin: map[string]string{}}
	fs := newFlagSet(c)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(fs, stdout)
			return nil, err
		}
		return nil, fmt.Errorf("command line: %v (eddy-node --help lists the options)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("command line: unexpected argument %q (options are --name value)", fs.Arg(0))
	}
	onCmdLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCmdLine[f.Name] = true; c.origin[f.Name] = "flag" })
	if c.showVersion {
		return c, nil
	}
	if !onCmdLine["config"] {
		if v, ok := getenv(envConfig); ok && v != "" {
			c.configFile = v
			c.origin["config"] = "env"
		}
	}
	var file map[string][]fileValue
	if c.configFile != "" {
		var err error
		if file, err = readConfigFile(c.configFile, fs); err != nil {
			return nil, err
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || onCmdLine[f.Name] || notFromEnvOrFile[f.Name] {
			return
		}
		env := envName(f.Name)
		if v, ok := getenv(env); ok {
			vals := []string{v}
			if f.Name == "source" {
				vals = strings.Fields(v)
			}
			for _, v := range vals {
				if e := fs.Set(f.Name, v); e != nil {
					err = fmt.Errorf("%s=%q: invalid value for --%s: %v", env, v, f.Name, e)
					return
				}
			}
			c.origin[f.Name] = "env"
			return
		}
		for _, fv := range file[f.Name] {
			if e := fs.Set(f.Name, fv.value); e != nil {
				err = fmt.Errorf("config file %s line %d: invalid value %q for %s (--%s): %v", c.configFile, fv.line, fv.value, f.Name, f.Name, e)
				return
			}
			c.origin[f.Name] = "file"
		}
	})
	if err != nil {
		return nil, err
	}
	fs.VisitAll(func(f *flag.Flag) {
		if c.origin[f.Name] == "" {
			c.origin[f.Name] = "default"
		}
	})
	return c, nil
}

type fileValue struct {
	value string
	line  int
}

// readConfigFile reads a config file: one option a line as `name = value`
// (name: the flag's name without dashes), blank lines and lines starting
// with '#' ignored, the value optionally in double quotes (Go escapes). A
// repeatable option (source) may appear on several lines; any other option
// at most once.
func readConfigFile(path string, fs *flag.FlagSet) (map[string][]fileValue, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %v", err)
	}
	defer f.Close()
	out := map[string][]fileValue{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("config file %s line %d: want name = value", path, n)
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		name = strings.TrimLeft(name, "-")
		if where, ok := secretKeys[name]; ok {
			return nil, fmt.Errorf("config file %s line %d: %q is a secret and is not read from the config file: use %s", path, n, name, where)
		}
		if fs.Lookup(name) == nil || notFromEnvOrFile[name] {
			return nil, fmt.Errorf("config file %s line %d: unknown option %q (eddy-node --help lists the options)", path, n, name)
		}
		if strings.HasPrefix(value, `"`) {
			// The quoted string, then nothing or a comment.
			q, err := strconv.QuotedPrefix(value)
			if rest := strings.TrimSpace(value[len(q):]); err == nil && rest != "" && !strings.HasPrefix(rest, "#") {
				err = fmt.Errorf("%q after the closing quote", rest)
			}
			if err != nil {
				return nil, fmt.Errorf("config file %s line %d: %s: bad quoted value: %v", path, n, name, err)
			}
			value, _ = strconv.Unquote(q)
		} else if i := strings.Index(value, " #"); i >= 0 {
			value = strings.TrimSpace(value[:i]) // a trailing comment
		}
		if len(out[name]) > 0 && name != "source" {
			return nil, fmt.Errorf("config file %s line %d: %s is set twice (line %d first)", path, n, name, out[name][0].line)
		}
		out[name] = append(out[name], fileValue{value: value, line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, err)
	}
	return out, nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// validate checks every option; the error names the option.
func (c *config) validate(getenv func(string) (string, bool)) error {
	if c.id == "" {
		return errors.New("--id is required (it names the node's certificate)")
	}
	if !idPattern.MatchString(c.id) {
		return fmt.Errorf("--id %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", c.id)
	}
	if c.dataDir == "" {
		return errors.New("--data-dir is required")
	}
	// Absolute, so the default store (file://<data-dir>/store) is a file
	// URL even when the directory was given relative.
	abs, err := filepath.Abs(c.dataDir)
	if err != nil {
		return fmt.Errorf("--data-dir %s: %v", c.dataDir, err)
	}
	c.dataDir = abs
	if c.certsDir == "" {
		return errors.New("--certs-dir is required (eddy-ctl certs makes one)")
	}
	if tok, _ := getenv(envAdminToken); c.tokenFile == "" && tok == "" {
		return errors.New("--admin-token-file (or " + envAdminToken + ") is required")
	}
	for _, a := range []struct{ name, v string }{{"--raft-addr", c.raftAddr}, {"--admin-addr", c.adminAddr}, {"--http-addr", c.httpAddr}} {
		if err := checkAddr(a.v, true); err != nil {
			return fmt.Errorf("%s %q: %v", a.name, a.v, err)
		}
	}
	if c.sourceAddr != "" && net.ParseIP(c.sourceAddr) == nil {
		return fmt.Errorf("--source-addr %q: not an IP address", c.sourceAddr)
	}
	for _, a := range []struct{ name, v string }{{"--raft-advertise", c.raftAdvertise}, {"--admin-advertise", c.adminAdvertise}, {"--http-advertise", c.httpAdvertise}} {
		if a.v == "" {
			continue
		}
		if err := checkAddr(a.v, false); err != nil {
			return fmt.Errorf("%s %q: %v", a.name, a.v, err)
		}
		if host, _, _ := net.SplitHostPort(a.v); net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
			return fmt.Errorf("%s %q: an address others dial, not one that means every interface", a.name, a.v)
		}
	}
	if c.join != "" {
		for _, a := range strings.Split(c.join, ",") {
			if err := checkAddr(strings.TrimPrefix(strings.TrimSpace(a), "http://"), false); err != nil {
				return fmt.Errorf("--join %q: %v", a, err)
			}
		}
	}
	if c.restoreFromBucket && (c.nonvoter || c.join != "") {
		return errors.New("--restore-from-bucket with --join or --nonvoter: a restore forms a new cluster of this node; start the others with --join once it leads")
	}
	if c.nonvoter && c.bootstrap {
		return errors.New("--nonvoter with --bootstrap: the node that forms the cluster is its first voter; start non-voters with --join and --nonvoter")
	}
	if _, err := ingest.ParsePLCFlag(c.plc); err != nil {
		return err
	}
	if c.flushInterval < 50*time.Millisecond || c.flushInterval > 10*time.Minute {
		return fmt.Errorf("--flush-interval %v: out of range 50ms..10m", c.flushInterval)
	}
	if c.readyLagMax < 500*time.Millisecond || c.readyLagMax > time.Hour {
		return fmt.Errorf("--ready-lag-max %v: out of range 500ms..1h", c.readyLagMax)
	}
	if c.clientRate < 0 || c.clientRate > 1e6 || math.IsNaN(c.clientRate) {
		return fmt.Errorf("--client-rate %v: out of range 0..1000000", c.clientRate)
	}
	if c.clientBurst < 1 || c.clientBurst > 1e7 {
		return fmt.Errorf("--client-burst %d: out of range 1..10000000", c.clientBurst)
	}
	if c.clientInFlight < 0 || c.clientInFlight > query.ConcurrentQueriesMax {
		return fmt.Errorf("--client-in-flight %d: out of range 0..%d", c.clientInFlight, query.ConcurrentQueriesMax)
	}
	if c.clientSlots < 0 || c.clientSlots > query.ConcurrentQueriesMax {
		return fmt.Errorf("--client-slots %d: out of range 0..%d", c.clientSlots, query.ConcurrentQueriesMax)
	}
	if c.clientConns < 0 || c.clientConns > 100000 {
		return fmt.Errorf("--client-conns %d: out of range 0..100000", c.clientConns)
	}
	if c.clientPaceGap < 0 || c.clientPaceGap > 10*time.Millisecond {
		return fmt.Errorf("--client-pace-gap %v: out of range 0..10ms", c.clientPaceGap)
	}
	if c.querySlots < 0 || c.querySlots > query.ConcurrentQueriesMax {
		return fmt.Errorf("--query-slots %d: out of range 0..%d", c.querySlots, query.ConcurrentQueriesMax)
	}
	if _, err := query.ParseTrustedProxies(c.trustedProxies); err != nil {
		return fmt.Errorf("--trusted-proxies: %v", err)
	}
	if c.memtableBytes < 1<<20 || c.memtableBytes > 4<<30 {
		return fmt.Errorf("--memtable-bytes %d: out of range 1 MiB..4 GiB", c.memtableBytes)
	}
	if c.stateBackupInterval < 100*time.Millisecond || c.stateBackupInterval > 24*time.Hour {
		return fmt.Errorf("--state-backup-interval %v: out of range 100ms..24h", c.stateBackupInterval)
	}
	if c.gcGrace < time.Second || c.gcGrace > 24*time.Hour {
		return fmt.Errorf("--gc-grace %v: out of range 1s..24h", c.gcGrace)
	}
	if c.compactionFanIn < 2 || c.compactionFanIn > 64 {
		return fmt.Errorf("--compaction-fan-in %d: out of range 2..64", c.compactionFanIn)
	}
	if c.compactionInterval < 100*time.Millisecond || c.compactionInterval > time.Hour {
		return fmt.Errorf("--compaction-interval %v: out of range 100ms..1h", c.compactionInterval)
	}
	if c.cacheBytes < 1<<20 || c.cacheBytes > 1<<40 {
		return fmt.Errorf("--cache-bytes %d: out of range 1 MiB..1 TiB", c.cacheBytes)
	}
	if c.largeReadMemory != 0 && (c.largeReadMemory < 1<<20 || c.largeReadMemory > 1<<40) {
		return fmt.Errorf("--large-read-memory %d: out of range 1 MiB..1 TiB, or 0", c.largeReadMemory)
	}
	if err := checkMemoryLimit(c.memoryLimit); err != nil {
		return err
	}
	if c.metaCacheBytes != 0 && (c.metaCacheBytes < 1<<20 || c.metaCacheBytes > 1<<40) {
		return fmt.Errorf("--meta-cache-bytes %d: out of range 1 MiB..1 TiB", c.metaCacheBytes)
	}
	switch c.logLevel {
	case "trace", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", c.logLevel)
	}
	if c.store != "" {
		if err := checkStore(c.store); err != nil {
			return fmt.Errorf("--store %s: %v", redactStore(c.store), err)
		}
	}
	names := map[string]bool{}
	for _, s := range c.sources {
		src, err := ingest.ParseSource(s, nil)
		if err != nil {
			return fmt.Errorf("--source: %w", err)
		}
		// A source's cursor, metrics and resyncs are kept under its name:
		// two of one name would overwrite each other's cursor, and each
		// restart would send one back to its relay's head (a firehose's
		// name is its kind: one relay stream, one Jetstream, one
		// Jetstream v2 a node).
		if names[src.Name()] {
			return fmt.Errorf("--source: two sources named %q: a node follows one stream of each kind (its cursor is kept under that name); list a Jetstream's other instances in the one source (jetstream+wss://a/subscribe,wss://b/subscribe)", src.Name())
		}
		names[src.Name()] = true
	}
	return nil
}

// checkAddr checks a host:port; a listen address may leave the host empty
// (every interface).
func checkAddr(a string, listen bool) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want host:port: %v", err)
	}
	if host == "" && !listen {
		return errors.New("want host:port: the host is empty")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q: want 1..65535", port)
	}
	return nil
}

// checkStore checks the store URL's form without opening it; it never
// echoes the URL (which may carry parameters an operator wants private).
func checkStore(s string) error {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return nil // a plain path
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a valid URL")
	}
	if u.User != nil {
		return fmt.Errorf("credentials are not accepted in the URL; use %s/%s or access_key_file/secret_key_file", objstore.EnvS3AccessKey, objstore.EnvS3SecretKey)
	}
	switch scheme {
	case "file", "s3":
		return nil
	}
	return fmt.Errorf("unsupported scheme %q (want file or s3)", scheme)
}

// redactSources shows the sources as redactStore shows a store (each
// URL of a source's failover list), space-separated as in the environment.
func redactSources(sources []string) string {
	out := make([]string, len(sources))
	for i, src := range sources {
		urls := strings.Split(src, ",")
		for j, u := range urls {
			urls[j] = redactStore(u)
		}
		out[i] = strings.Join(urls, ",")
	}
	return strings.Join(out, " ")
}

// redactStore shows a store URL without its user information and query
// (which may name credential files or carry unknown parameters).
func redactStore(s string) string {
	if i := strings.IndexByte(s, '?'); i >= 0 {
		s = s[:i]
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		if at := strings.IndexByte(rest, '@'); at >= 0 {
			if slash := strings.IndexByte(rest, '/'); slash < 0 || at < slash {
				rest = "REDACTED@" + rest[at+1:]
			}
		}
		s = scheme + "://" + rest
	}
	return s
}

// logged returns the effective options and where each came from, for the
// start-up log line; no option holds a secret, and the store is redacted.
func (c *config) logged() []any {
	vals := map[string]string{
		"id": c.id, "data-dir": c.dataDir, "raft-addr": c.raftAddr, "raft-advertise": c.raftAdvertise, "admin-advertise": c.adminAdvertise, "http-advertise": c.httpAdvertise, "source-addr": c.sourceAddr,
		"admin-addr": c.adminAddr, "http-addr": c.httpAddr, "bootstrap": strconv.FormatBool(c.bootstrap),
		"nonvoter": strconv.FormatBool(c.nonvoter), "join": c.join, "certs-dir": c.certsDir, "admin-token-file": c.tokenFile, "store": redactStore(c.store),
		"source": redactSources(c.sources), "plc": c.plc, "flush-interval": c.flushInterval.String(),
		"memtable-bytes": strconv.Itoa(c.memtableBytes), "cache-bytes": strconv.FormatInt(c.cacheBytes, 10),
		"meta-cache-bytes": strconv.FormatInt(c.metaCacheBytes, 10), "memory-limit": c.memoryLimit,
		"ready-lag-max": c.readyLagMax.String(), "log-level": c.logLevel, "config": c.configFile,
		"client-rate": strconv.FormatFloat(c.clientRate, 'f', -1, 64), "client-burst": strconv.Itoa(c.clientBurst),
		"client-in-flight": strconv.Itoa(c.clientInFlight), "trusted-proxies": c.trustedProxies, "query-slots": strconv.Itoa(c.querySlots), "large-read-memory": strconv.FormatInt(c.largeReadMemory, 10), "client-slots": strconv.Itoa(c.clientSlots), "client-pace-gap": c.clientPaceGap.String(), "client-conns": strconv.Itoa(c.clientConns),
		"restore-from-bucket": strconv.FormatBool(c.restoreFromBucket), "state-backup-interval": c.stateBackupInterval.String(),
		"gc-grace": c.gcGrace.String(), "compaction-fan-in": strconv.Itoa(c.compactionFanIn), "compaction-interval": c.compactionInterval.String(),
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	var kv []any
	for _, k := range names {
		kv = append(kv, k, vals[k]+" ("+c.origin[k]+")")
	}
	return kv
}
