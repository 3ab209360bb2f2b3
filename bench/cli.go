package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/eddy-backlinks/eddy/internal/cliflag"
)

// ErrUsage marks an error caused by bad arguments (exit code 2).
var ErrUsage = errors.New("usage")

const usageText = `Usage: %s lsm [flags]

Writes a deterministic synthetic workload shaped like the atproto network
(package lsm/workload) through lsm.DB, checks the answers against the
workload's own bookkeeping, measures size, write speed, queries and counts,
loads the same links into Pebble for comparison, and prints the figures.

Flags:
`

// Main runs the command line `name lsm [flags]`: args are what follows
// name. name is how the user called the bench ("eddy-bench", or "eddy-ctl
// bench" through eddy-ctl's shim); the usage text is written with it. The
// figures go to stdout (one JSON object with --json, else a line per
// figure), the progress log to stderr. -h gives flag.ErrHelp, bad arguments
// an error wrapping ErrUsage.
func Main(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "scale" {
		return scaleMain(name, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "serve" {
		return serveMain(ctx, name, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "clients" {
		return clientsMain(ctx, name, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "clients-flood" {
		return clientsFloodMain(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "clients-serve" {
		return clientsServeMain(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "peers" {
		return peersMain(ctx, name, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "lsm" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintf(stdout, usageText, name)
			Flags(&Config{}, stdout).PrintDefaults()
			return flag.ErrHelp
		}
		// The last word of name: "bench" for eddy-ctl bench.
		return fmt.Errorf("%w: want `%s lsm [flags]`", ErrUsage, name[strings.LastIndex(name, " ")+1:])
	}
	var cfg Config
	fs := Flags(&cfg, stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, usageText, name)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	res, err := Run(ctx, cfg, stderr)
	if res != nil {
		if cfg.JSON {
			enc := json.NewEncoder(stdout)
			if e := enc.Encode(res); e != nil && err == nil {
				err = e
			}
		} else {
			printText(stdout, res)
		}
	}
	return err
}

// Config is a run's settings: the flags of bench lsm.
type Config struct {
	Links         int
	Seed          uint64
	Store         string // file, s3 or a store URL
	JSON          bool
	Queries       int
	MemtableBytes int
	FanIn         int // lsm.Options.CompactionFanIn (0: the default)
	// ShardTargetBytes is lsm.Options.ShardTargetBytes: a compacted
	// run's shard per this many bytes of input tables (0: the default).
	ShardTargetBytes uint64
	// MetaCacheBytes is lsm.Options.MetaCacheBytes: 0 (the default) maps
	// the table metadata, > 0 bounds a cache of decoded metadata, < 0
	// keeps all of it decoded.
	MetaCacheBytes int64
	CPUProfile     string
	HeapProfile    string
	ProfilePhase   string // all, write, compact, query, cold, count or pebble
	Tmp            string
	Keep           bool
	NoPebble       bool
	Breakdown      bool
	// Shape: ShapeMem (the in-memory workload.Generate), or a streaming
	// shape of workload.Stream (backfill, live).
	Shape     string
	LiveLinks int // --live-links: the live tail after a backfill
	MegaLinks int // --mega-links (streaming shapes)
	// AccountClocks (--account-clocks): one TID clock id per account, the
	// streaming shapes' model before this flag.
	AccountClocks bool
	// CompactFull: after the write phase, merge every run of each tree
	// into one (lsm.DB.CompactFull), timed on its own.
	CompactFull bool
}

// ShapeMem is the in-memory workload (workload.Generate), the default.
const ShapeMem = "mem"

func (c *Config) validate() error {
	if c.Links < 1000 {
		return fmt.Errorf("%w: --links must be at least 1000", ErrUsage)
	}
	switch c.Shape {
	case ShapeMem:
	case "backfill", "live":
		if c.Breakdown {
			return fmt.Errorf("%w: --breakdown needs --shape mem", ErrUsage)
		}
		c.NoPebble = true // Pebble is fed the in-memory workload only
	default:
		return fmt.Errorf("%w: --shape must be mem, backfill or live", ErrUsage)
	}
	if c.CompactFull && c.Shape == ShapeMem {
		return fmt.Errorf("%w: --compact-full needs a streaming --shape", ErrUsage)
	}
	switch c.ProfilePhase {
	case "all", "write", "compact", "query", "cold", "count", "pebble":
	default:
		return fmt.Errorf("%w: --profile-phase must be all, write, compact, query, cold, count or pebble", ErrUsage)
	}
	return nil
}

// Flags returns the flag set of bench lsm, filling c (with the defaults
// before parsing).
func Flags(c *Config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bench lsm", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.Links, "links", 2_000_000, "backlinks to write")
	fs.Uint64Var(&c.Seed, "seed", 1, "workload seed")
	fs.StringVar(&c.Store, "store", "file", "object store: file (a temporary directory), s3 (a MinIO server started for the run), or a store URL (objstore.Open; the run uses a fresh prefix in it and deletes it after)")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object")
	fs.IntVar(&c.Queries, "queries", 4000, "warm queries (targets with up to 1,000 links, limit 100)")
	fs.IntVar(&c.MemtableBytes, "memtable-bytes", 0, "memtable bound per tree (0: lsm.DefaultMemtableBytes)")
	fs.IntVar(&c.FanIn, "fan-in", 0, "flushes of a tier merged at once, merged runs twice as many (0: lsm.DefaultCompactionFanIn, as a node's --compaction-fan-in)")
	fs.Uint64Var(&c.ShardTargetBytes, "shard-target-bytes", 0, "a compacted run's shard per this many bytes of input tables (0: lsm.DefaultShardTargetBytes): small, for tests whose merges must split their inputs")
	fs.Int64Var(&c.MetaCacheBytes, "meta-cache-bytes", 0, "0: table metadata mapped and read in place (the default); > 0: a cache of decoded metadata of that size; < 0: all decoded")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of --profile-phase to this file")
	fs.StringVar(&c.HeapProfile, "heapprofile", "", "write a heap profile of the largest live Go heap seen in --profile-phase (sampled with the RSS five times a second; a phase too short for a sample leaves the heap at the run's end) to this file")
	fs.StringVar(&c.ProfilePhase, "profile-phase", "all", "phase the CPU profile (and --heapprofile) covers: all (from the first write to the end), write (the write phase), compact (the full compaction of --compact-full), query (the timed warm queries), cold (the cold queries), count (the counts of the mega target) or pebble")
	fs.StringVar(&c.Tmp, "tmp", "", "directory for the run's temporary files (default: the system's)")
	fs.BoolVar(&c.Keep, "keep", false, "keep the temporary files (and a URL store's objects)")
	fs.BoolVar(&c.NoPebble, "no-pebble", false, "skip the Pebble comparison")
	fs.BoolVar(&c.Breakdown, "breakdown", false, "estimate what each field of a backlink costs in the data objects (rebuilds the tables with one field blanked at a time)")
	fs.StringVar(&c.Shape, "shape", ShapeMem, "workload: mem (generated whole in memory first, as before; up to ~20M links), backfill (streamed: every repository of the network's history written whole at one stamp, then a live tail) or live (streamed: a live tail only); the streaming shapes hold a sample of targets, not the links, skip Pebble and check every page of the sample")
	fs.BoolVar(&c.AccountClocks, "account-clocks", false, "streaming shapes: give each account one TID clock id for all its records (the model before real TIDs were measured) instead of its host's, which changes with each restart")
	fs.IntVar(&c.LiveLinks, "live-links", 0, "--shape backfill: links of the live tail after the backfill (0: --links/20)")
	fs.IntVar(&c.MegaLinks, "mega-links", 0, "streaming shapes: about this many links to the mega target (0: min(1,000,000, --links/4))")
	fs.BoolVar(&c.CompactFull, "compact-full", false, "streaming shapes: after the write phase, merge every run of each tree into one (a major compaction, as after a backfill), timed apart from the writes; the sizes, queries and checks are of the compacted index")
	return fs
}

// parseFlags parses args into fs: -h gives flag.ErrHelp, a bad flag or a
// stray argument a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error { return cliflag.Parse(fs, args, ErrUsage) }
