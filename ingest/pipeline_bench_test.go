package ingest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/ingest/simnet"
	"github.com/eddy-backlinks/eddy/internal/jetstreamtest"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore/local"
)

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runPipeline runs the leader's write path on one Raft node over sources
// until done(node) and reports events (or records) per CPU-second.
func runPipeline(b *testing.B, sources []Source, done func(*Runner) bool, units int, unit string) {
	b.Helper()
	cpu, wall := pipelineRun(b, sources, done)
	b.ReportMetric(float64(units)/cpu.Seconds(), unit+"/cpu-s")
	b.ReportMetric(float64(units)/wall.Seconds(), unit+"/s")
}

// pipelineRun runs the leader's write path on one Raft node over sources
// until done(node) and returns the CPU time this process spent (from the
// write path's start to done) and the wall time.
func pipelineRun(b *testing.B, sources []Source, done func(*Runner) bool) (cpu, wall time.Duration) {
	b.Helper()
	node := oneNode(b)
	store, err := local.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	cat := lsm.NewCatalog(b.TempDir(), store)
	r := &Runner{Config: Config{Node: node, Store: store, Catalog: cat, FlushInterval: 2 * time.Second}, Sources: sources}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cpu0, start := processCPU(), time.Now()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	for !done(r) {
		select {
		case err := <-errc:
			b.Fatalf("write path stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cpu, wall = processCPU()-cpu0, time.Since(start)
	cancel()
	<-errc
	return cpu, wall
}

// BenchmarkPipelineReplay: stream to published tables, per core, for a
// firehose capture and its Jetstream twin of a simulated network
// (go test ./ingest -run '^$' -bench Pipeline -benchtime 1x).
func BenchmarkPipelineReplay(b *testing.B) {
	world := simnet.NewWorld(simnet.Config{Seed: 3, Accounts: 2000})
	world.Step(100_000)
	dir := b.TempDir()
	for _, c := range []struct{ name, file string }{{"firehose", "capture.bin"}, {"jetstream", "capture.jsonl"}} {
		path := filepath.Join(dir, c.file)
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if c.name == "firehose" {
			err = world.WriteFirehose(f)
		} else {
			err = world.WriteJetstream(f)
		}
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		events := world.JetstreamCount()
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				src := &Replay{Path: path}
				runPipeline(b, []Source{src}, func(r *Runner) bool {
					return Done(r.Config.Node.FSM.Cursor(src.Name()))
				}, events, "events")
			}
		})
	}
}

// BenchmarkBackfill: repositories from the simulated PDSes to published
// tables, records per CPU-second of this process alone. The simulated
// network (1,000 accounts, 100,000 steps) runs in a process of its own
// (ingest/simnet/simserve, built into the benchmark's temporary directory),
// so the CPU it spends building each repository's MST and CAR is not
// counted as Eddy's; it is reported apart as simnet-cpu-s (per backfill,
// from /proc, Linux only). Each of the b.N iterations backfills the whole
// network into a new single-node cluster; the figures are totals over all
// of them (with -benchtime 1x, one backfill in a cold process).
//
//	go test ./ingest -run '^$' -bench 'Backfill$' -benchtime 1x
func BenchmarkBackfill(b *testing.B) {
	sim := startSimserve(b, 4, 1000, 100_000)
	b.ResetTimer()
	var cpu, wall, simCPU time.Duration
	for i := 0; i < b.N; i++ {
		bf := &Backfill{Relay: sim.Relay, PLC: sim.PLC, DIDWeb: sim.PLC}
		simCPU0 := sim.cpu()
		c, w := pipelineRun(b, []Source{bf}, func(r *Runner) bool {
			return Done(r.Config.Node.FSM.Cursor(bf.Name()))
		})
		cpu, wall, simCPU = cpu+c, wall+w, simCPU+sim.cpu()-simCPU0
		checkBackfilled(b, bf, sim.Accounts)
	}
	records := float64(sim.Records * b.N)
	b.ReportMetric(records/cpu.Seconds(), "records/cpu-s")
	b.ReportMetric(records/wall.Seconds(), "records/s")
	if simCPU > 0 {
		b.ReportMetric(simCPU.Seconds()/float64(b.N), "simnet-cpu-s")
	}
}

// BenchmarkBackfillSources: the same simulated network (simserve, seed 4,
// 1,000 accounts, 100,000 steps, Verifiable, no did:web) backfilled two
// ways into one leader's write path: "crawl", Eddy's own backfill of every
// repository from its PDS (listRepos, DID documents, getRepo, CAR decode),
// and "archive", the Jetstream v2 source reading a real Jetstream v2
// server's archive of it (the server, bin jetstream-v0.2.0 from `make
// jetstream` or $EDDY_JETSTREAM_BIN, crawls the network first; its work is
// not counted). records/cpu-s is the network's records per CPU-second of
// the benchmark process, from the write path's start until the source's
// cursor is committed (the archive: at its sealed tip); events/cpu-s, for
// the archive, every event of it (creates, identity and account events).
//
//	go test ./ingest -run '^$' -bench 'BackfillSources' -benchtime 1x -count 3
func BenchmarkBackfillSources(b *testing.B) {
	sim := startSimserve(b, 4, 1000, 100_000, "--verifiable", "--web-percent", "-1")
	b.Run("crawl", func(b *testing.B) {
		var cpu, wall time.Duration
		for i := 0; i < b.N; i++ {
			bf := &Backfill{Relay: sim.Relay, PLC: sim.PLC}
			c, w := pipelineRun(b, []Source{bf}, func(r *Runner) bool {
				return Done(r.Config.Node.FSM.Cursor(bf.Name()))
			})
			cpu, wall = cpu+c, wall+w
			checkBackfilled(b, bf, sim.Accounts)
		}
		records := float64(sim.Records * b.N)
		b.ReportMetric(records/cpu.Seconds(), "records/cpu-s")
		b.ReportMetric(records/wall.Seconds(), "records/s")
	})
	b.Run("archive", func(b *testing.B) {
		js := jetstreamtest.Start(b, sim.Relay, sim.PLC)
		tip := js.Tip(b)
		var cpu, wall time.Duration
		for i := 0; i < b.N; i++ {
			src, err := NewJetstream2("http://"+js.Addr, nil)
			if err != nil {
				b.Fatal(err)
			}
			c, w := pipelineRun(b, []Source{src}, func(r *Runner) bool {
				seq, _, _ := strings.Cut(r.Config.Node.FSM.Cursor(src.Name()), "@")
				n, _ := strconv.ParseInt(seq, 10, 64)
				return n >= tip
			})
			cpu, wall = cpu+c, wall+w
		}
		b.ReportMetric(float64(sim.Records*b.N)/cpu.Seconds(), "records/cpu-s")
		b.ReportMetric(float64(sim.Records*b.N)/wall.Seconds(), "records/s")
		b.ReportMetric(float64(tip*int64(b.N))/cpu.Seconds(), "events/cpu-s")
	})
}

// BenchmarkBackfillInProcessSimnet is BenchmarkBackfill with the simulated
// network served inside the benchmark process, as the figure was first
// measured: its CPU counts the network's work too.
//
//	go test ./ingest -run '^$' -bench 'BackfillInProcessSimnet' -benchtime 1x
func BenchmarkBackfillInProcessSimnet(b *testing.B) {
	world := simnet.NewWorld(simnet.Config{Seed: 4, Accounts: 1000})
	world.Step(100_000)
	sim, err := simnet.Serve(world)
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	records := world.RecordCount()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bf := &Backfill{Relay: sim.RelayURL(), PLC: sim.PLCURL(), DIDWeb: sim.PLCURL()}
		runPipeline(b, []Source{bf}, func(r *Runner) bool {
			return Done(r.Config.Node.FSM.Cursor(bf.Name()))
		}, records, "records")
		checkBackfilled(b, bf, len(world.Accounts()))
	}
}

// checkBackfilled fails the benchmark unless every listed repository was
// accounted for and none failed: a fast backfill that fetched nothing
// measures nothing.
func checkBackfilled(b *testing.B, bf *Backfill, accounts int) {
	b.Helper()
	st := bf.Stats().Snapshot()
	if st["listed"] != accounts || st["failed"] != 0 || st["done"] == 0 {
		b.Fatalf("backfill stats %v, want %d listed and none failed", st, accounts)
	}
}

// simserveProc is a simulated network served by ingest/simnet/simserve in
// a process of its own.
type simserveProc struct {
	PLC, Relay        string
	Accounts, Records int
	pid               int
}

// startSimserve builds ingest/simnet/simserve into b.TempDir(), starts it
// and reads the URLs it prints; the process is stopped when b ends (and
// exits by itself if this process dies: its stdin is a pipe from here).
func startSimserve(b *testing.B, seed int64, accounts, steps int, extra ...string) *simserveProc {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "simserve")
	build := exec.Command("go", "build", "-o", bin, "github.com/eddy-backlinks/eddy/ingest/simnet/simserve")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build simserve: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append([]string{"--seed", strconv.FormatInt(seed, 10), "--accounts", strconv.Itoa(accounts),
		"--steps", strconv.Itoa(steps), "--exit-on-stdin-eof"}, extra...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	var line string
	select {
	case l, ok := <-lines:
		if !ok {
			b.Fatal("simserve exited before printing its URLs")
		}
		line = l
	case <-time.After(5 * time.Minute):
		b.Fatal("simserve printed no URLs within 5 minutes")
	}
	var ready struct {
		PLC      string `json:"plc"`
		Relay    string `json:"relay"`
		Accounts int    `json:"accounts"`
		Records  int    `json:"records"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil {
		b.Fatalf("simserve ready line %q: %v", line, err)
	}
	if ready.PLC == "" || ready.Relay == "" || ready.Records <= 0 || ready.Accounts != accounts {
		b.Fatalf("simserve ready line %q: missing URLs or counts", line)
	}
	return &simserveProc{PLC: ready.PLC, Relay: ready.Relay, Accounts: ready.Accounts, Records: ready.Records, pid: cmd.Process.Pid}
}

// cpu returns the CPU time the simserve process has used so far (user +
// system, from /proc/<pid>/stat), or 0 where that cannot be read.
func (p *simserveProc) cpu() time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15 (in clock ticks, USER_HZ,
	// which is 100 on Linux).
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * (time.Second / 100)
}
