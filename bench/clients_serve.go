package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime/metrics"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/eddy-backlinks/eddy/extract"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore/local"
	"github.com/eddy-backlinks/eddy/query"
)

type clientsServer struct {
	cmd *exec.Cmd
	url string
}

func (s *clientsServer) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// latency is the server's p50 and p99 of the normal clients' queries
// since the last call, and its goroutines' scheduling latency p99 (0s if
// it cannot say).
func (s *clientsServer) latency() (p50, p99, sched99 float64) {
	r, err := http.Get(s.url + "/bench/latency")
	if err != nil {
		return 0, 0, 0
	}
	defer r.Body.Close()
	var v map[string]float64
	json.NewDecoder(r.Body).Decode(&v)
	return v["p50_us"], v["p99_us"], v["sched_p99_us"]
}

// trace asks the server for a Go execution trace of d, after a wait,
// written to out.
func (s *clientsServer) trace(out string, wait, d time.Duration) {
	time.Sleep(wait)
	r, err := http.Get(s.url + "/bench/trace?" + url.Values{"out": {out}, "seconds": {strconv.FormatFloat(d.Seconds(), 'f', -1, 64)}}.Encode())
	if err == nil {
		r.Body.Close()
	}
}

// rss is the server process's resident memory (0 where unknown).
func (s *clientsServer) rss() int64 {
	return procStatusBytesOf(strconv.Itoa(s.cmd.Process.Pid), "VmRSS")
}

// startClientsServer starts cmd (clients-serve) and waits for the URL it
// serves on.
func startClientsServer(cmd *exec.Cmd, stderr io.Writer) (*clientsServer, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("clients-serve: %v", err)
	}
	go io.Copy(io.Discard, out)
	return &clientsServer{cmd: cmd, url: strings.TrimSpace(strings.TrimPrefix(line, "serving "))}, nil
}

// clientsServeMain is the child of `eddy-bench clients`: it indexes
// --targets posts of --likes likes each (through the codec and the
// extractor, as ingest does), serves them with the node's query server on
// a loopback port (with the node's default per-client limits when
// --limits), prints "serving URL" and serves until killed.
func clientsServeMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("clients-serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	targets := fs.Int("targets", 2000, "")
	likes := fs.Int("likes", 150, "")
	limits := fs.Bool("limits", true, "")
	clientSlots := fs.Int("client-slots", 0, "")
	paceGap := fs.Duration("client-pace-gap", query.DefaultPaceGap, "")
	conns := fs.Int("client-conns", query.DefaultClientConns, "")
	ingestRate := fs.Float64("ingest-rate", 0, "links indexed a second while serving (0: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "eddy-bench-clients-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := local.New(dir + "/store")
	if err != nil {
		return err
	}
	db, err := lsm.Open(ctx, lsm.Options{Store: store, Dir: dir + "/db"})
	if err != nil {
		return err
	}
	defer db.Close()
	codec := &link.Codec{Outlines: link.NewMemOutlines()}
	var stamp uint64
	// like indexes liker's like of post t, as ingest would.
	like := func(t, liker int) error {
		stamp++
		rec := `{"$type":"app.bsky.feed.like","subject":{"cid":"bafyreiftot7eltsc3f6g4qktykmbv6jcmdmhcx5osscan6jpdxkpqcmcza","uri":"` + clientsPost(t) + `"},"createdAt":"2026-07-04T14:38:08.999Z"}`
		m, err := atdata.UnmarshalJSON([]byte(rec))
		if err != nil {
			return err
		}
		src, err := codec.Record(fmt.Sprintf("did:plc:liker%018d", liker), "app.bsky.feed.like", string(syntax.NewTID(int64(1_700_000_000_000_000+stamp), 0)), true)
		if err != nil {
			return err
		}
		links, _ := extract.Extract(m)
		for _, l := range links {
			tg := codec.TargetKey(&l.Target)
			loc, err := codec.Location(l.Path, l.StrongRef, true)
			if err != nil {
				return err
			}
			bl := &link.Backlink{Target: tg, Source: src, Location: loc, SourceRev: stamp}
			err = db.AddBacklink(bl)
			if errors.Is(err, lsm.ErrFull) {
				if err = db.Flush(ctx); err == nil {
					err = db.AddBacklink(bl)
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	for t := range *targets {
		for k := range *likes {
			if err := like(t, k*7919+t%97); err != nil {
				return err
			}
		}
	}
	if err := db.Flush(ctx); err != nil {
		return err
	}
	views := query.NewViews(dbManifest{db}, lsm.NewCatalog(dir+"/cat", store), nil)
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go views.Run(vctx)
	if _, err := views.WaitFor(ctx, db.View().Generation()); err != nil {
		return err
	}
	qs := query.NewServer(views, lsm.NewReader(store, nil), codec, nil)
	if *limits {
		qs.Clients = query.NewClientLimiter(query.ClientLimits{Rate: query.DefaultClientRate, Burst: query.DefaultClientBurst, InFlight: query.DefaultClientInFlight, RefusalDelay: query.DefaultRefusalDelay, SlotsPerClient: *clientSlots, PaceGap: cmp.Or(*paceGap, -1), Conns: cmp.Or(*conns, -1)})
	}
	if *ingestRate > 0 {
		// Ingest beside the queries, as a leader does: likes of the posts
		// at the network's rate, a flush every two seconds (the node's
		// --flush-interval), then what compaction picks; queries switch
		// to each new generation.
		go func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			start, flushed := time.Now(), time.Now()
			liker, added := 1_000_000_000, 0
			for ctx.Err() == nil {
				<-tick.C
				for ; float64(added) < *ingestRate*time.Since(start).Seconds(); added++ {
					liker++
					if err := like(liker%*targets, liker); err != nil {
						fmt.Fprintln(stderr, "clients-serve: ingest:", err)
						os.Exit(1)
					}
				}
				if time.Since(flushed) >= 2*time.Second {
					flushed = time.Now()
					err := db.Flush(ctx)
					for err == nil {
						var more bool
						if more, err = db.Compact(ctx); !more {
							break
						}
					}
					if err != nil {
						fmt.Fprintln(stderr, "clients-serve: flush:", err)
						os.Exit(1)
					}
				}
			}
		}()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ln = qs.Clients.Listener(ln) // as a node's: a client's connections bounded
	fmt.Fprintf(stdout, "serving http://%s\n", ln.Addr())
	// The server's own view of the normal clients' latency (from the
	// request's arrival to its answer written), to tell the server's
	// delay from the load generator's: GET /bench/latency returns the
	// p50 and p99 since the last such GET.
	var latMu sync.Mutex
	var lat []time.Duration
	h := qs.Handler()
	mux := http.NewServeMux()
	var prevSched []uint64
	mux.HandleFunc("/bench/latency", func(w http.ResponseWriter, r *http.Request) {
		latMu.Lock()
		l := lat
		lat = nil
		latMu.Unlock()
		slices.Sort(l)
		// The Go scheduler's latency (runnable to running) since the last
		// ask: time a request spends waiting for the CPU before the
		// handler's clock starts.
		sm := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
		metrics.Read(sm)
		hg := sm[0].Value.Float64Histogram()
		counts := slices.Clone(hg.Counts)
		for i := range prevSched {
			counts[i] -= prevSched[i]
		}
		prevSched = slices.Clone(hg.Counts)
		var total, acc uint64
		for _, c := range counts {
			total += c
		}
		sched := 0.0
		for i, c := range counts {
			acc += c
			if total > 0 && float64(acc) >= 0.99*float64(total) {
				sched = hg.Buckets[i+1] * 1e6 // the bucket's upper bound
				break
			}
		}
		json.NewEncoder(w).Encode(map[string]float64{"p50_us": percentile(l, 0.5), "p99_us": percentile(l, 0.99), "n": float64(len(l)), "sched_p99_us": sched})
	})
	mux.HandleFunc("/bench/trace", func(w http.ResponseWriter, r *http.Request) {
		secs, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f, err := os.Create(r.URL.Query().Get("out"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		time.Sleep(time.Duration(secs * float64(time.Second)))
		trace.Stop()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		if trace.IsEnabled() {
			// Whose query a goroutine of a trace runs (-trace).
			trace.Log(r.Context(), "peer", r.RemoteAddr)
		}
		h.ServeHTTP(w, r)
		if !strings.HasPrefix(r.RemoteAddr, clientsFloodAddr+":") {
			d := time.Since(t0)
			latMu.Lock()
			lat = append(lat, d)
			latMu.Unlock()
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}

// dbManifest is a ManifestSource of a DB in this process: Views looks
// for a new generation every second.
type dbManifest struct{ db *lsm.DB }

func (s dbManifest) Manifest() *lsm.Manifest { return s.db.View().Manifest }
func (s dbManifest) Watch() <-chan struct{}  { return nil }
