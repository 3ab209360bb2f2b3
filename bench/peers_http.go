package bench

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/lsm/workload"
	"github.com/eddy-backlinks/eddy/query"
	"github.com/eddy-backlinks/eddy/query/client"
)

// httpPeer is Eddy answering over HTTP, as a node does: the index the
// eddy peer writes (the engine, a local directory as its store) served by
// the node's query server (package query: the handler, the views that load
// a manifest's table metadata into their own mapped local directory, the
// 256 MiB frame cache) on a loopback port, and asked through the
// project's client (package query/client, eddy-ctl query's) over
// keep-alive connections: listBacklinks pages (oldest first, the targets
// named as strings, the answer's at-URIs rendered), and /links/all/count
// counts. What it adds to the engine's figures is what
// a client of a node pays: HTTP, JSON, rendering, the admission checks.
type httpPeer struct {
	*eddyPeer
	names  *peerNames
	plc    *peerPLC
	outl   link.Outlines
	srv    *http.Server
	client *client.Client // the project's own, as eddy-ctl query uses
	cancel context.CancelFunc
}

func openHTTPPeer(ctx context.Context, dir string, st *workload.Stream) (*httpPeer, error) {
	ep, err := openEddyPeer(ctx, dir, false)
	if err != nil {
		return nil, err
	}
	names := newPeerNames(st)
	plc := &peerPLC{names: names, seqs: map[string]uint64{}}
	st.AccountDIDs(func(field uint64) {
		if field&link.OutlinedBit == 0 {
			s, _ := names.did(field)
			plc.seqs[s] = field
		}
	})
	return &httpPeer{eddyPeer: ep, names: names, plc: plc, outl: st.Codec.Outlines}, nil
}

// peerPLC is the PLC directory of the stream's inline did:plc DIDs, as
// peerNames renders them.
type peerPLC struct {
	names *peerNames
	seqs  map[string]uint64
}

func (p *peerPLC) Seq(did string) (uint64, bool) { s, ok := p.seqs[did]; return s, ok }
func (p *peerPLC) DID(seq uint64) (string, bool) {
	s, err := p.names.did(seq)
	return s, err == nil
}

func (p *httpPeer) config() string {
	return "the eddy peer's index (engine defaults, compacted whole at the end, local directory store) served by the node's query server (package query: its handler, views with their own mapped metadata directory, a 256 MiB frame cache) on a loopback port; pages by blue.cerulea.backlinks.listBacklinks, counts by /links/all/count, through the project's client (query/client) with keep-alive connections"
}

// finish writes the index whole, then starts the query server on it.
func (p *httpPeer) finish(ctx context.Context) error {
	if err := p.eddyPeer.finish(ctx); err != nil {
		return err
	}
	src := dbManifest{p.db}
	gen := p.db.View().Generation()
	views := query.NewViews(src, lsm.NewCatalogMapped(filepath.Join(p.dir, "node-meta"), p.store), nil)
	cache := lsm.NewFrameCache(lsm.DefaultCacheBytes)
	views.Cache = cache
	reader := lsm.NewReader(p.store, cache)
	qs := query.NewServer(views, reader, &link.Codec{Outlines: p.outl, PLC: p.plc}, nil)
	bg, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go views.Run(bg)
	for views.Current().Generation() != gen {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	p.srv = &http.Server{Handler: qs.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	p.client = client.New("http://" + ln.Addr().String())
	return nil
}

func (p *httpPeer) page(ctx context.Context, target link.RecordID, after []byte, limit int) (int, []byte, error) {
	t, err := p.names.target(target)
	if err != nil {
		return 0, nil, err
	}
	res, _, err := p.client.ListBacklinks(ctx, t, string(after), min(limit, 1000))
	if err != nil {
		return 0, nil, err
	}
	n := 0
	for _, uris := range res.Backlinks {
		n += len(uris)
	}
	if res.Cursor == nil {
		return n, nil, nil
	}
	if *res.Cursor == "" {
		return 0, nil, errors.New("listBacklinks: an empty cursor")
	}
	return n, []byte(*res.Cursor), nil
}

func (p *httpPeer) count(ctx context.Context, target link.RecordID) (int, error) {
	t, err := p.names.target(target)
	if err != nil {
		return 0, err
	}
	var res struct {
		Links map[string]map[string]int `json:"links"`
	}
	if _, err := p.client.Get(ctx, "/links/all/count", url.Values{"target": {t}}, &res); err != nil {
		return 0, err
	}
	n := 0
	for _, paths := range res.Links {
		for _, c := range paths {
			n += c
		}
	}
	return n, nil
}

func (p *httpPeer) close() error {
	if p.srv != nil {
		p.srv.Close()
	}
	if p.cancel != nil {
		p.cancel()
	}
	return p.eddyPeer.close()
}
