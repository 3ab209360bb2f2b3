package simnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/klauspost/compress/zstd"

	"github.com/eddy-backlinks/eddy/ingest/event"
)

// Net serves a World on 127.0.0.1: a PLC directory, Config.PDSes PDS
// hosts, a relay and a Jetstream instance, each an httptest server of its
// own. It reads the World as it is when each request or stream message is
// served, so streams follow Step live. Close shuts everything down,
// streams included.
type Net struct {
	w         *World
	plc       *httptest.Server
	pds       []*httptest.Server
	relay     *httptest.Server
	jetstream *httptest.Server
	// The servers' base URLs, known before any serves (handlers read
	// them: a relay's listHosts names itself, a DID document its PDS).
	plcURL, relayURL, jetstreamURL string
	pdsURLs                        []string
	zenc                           *zstd.Encoder

	closing   chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	closed    bool
	conns     map[*websocket.Conn]struct{}
	wg        sync.WaitGroup // stream handlers and their readers

	// firehoseOldest is the oldest seq the relay still holds (0: all).
	firehoseOldest atomic.Int64
}

// SetFirehoseOldest makes the relay hold events from seq on only, as a
// relay's window does: a cursor before it gets an #info OutdatedCursor and
// the stream from there.
func (n *Net) SetFirehoseOldest(seq int64) { n.firehoseOldest.Store(seq) }

// Stream limits.
const (
	// writeTimeout bounds one websocket write: a client that stops reading
	// is dropped after it.
	writeTimeout = 30 * time.Second
	// listReposMax is listRepos' largest page (and its default is 500).
	listReposMax = 1000
	// plcExportMax is /export's largest count (and its default is 10), as
	// on plc.directory.
	plcExportMax = 1000
)

// Serve starts the servers of w.
func Serve(w *World) (*Net, error) {
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderDict(event.JetstreamDict()), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("simnet: zstd: %w", err)
	}
	n := &Net{w: w, zenc: zenc, closing: make(chan struct{}), conns: make(map[*websocket.Conn]struct{})}
	n.plc = httptest.NewUnstartedServer(http.HandlerFunc(n.servePLC))
	for i := 0; i < w.cfg.PDSes; i++ {
		n.pds = append(n.pds, httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			n.servePDS(i, rw, r)
		})))
	}
	n.relay = httptest.NewUnstartedServer(http.HandlerFunc(n.serveRelay))
	n.jetstream = httptest.NewUnstartedServer(http.HandlerFunc(n.serveJetstream))
	base := func(s *httptest.Server) string { return "http://" + s.Listener.Addr().String() }
	n.plcURL, n.relayURL, n.jetstreamURL = base(n.plc), base(n.relay), base(n.jetstream)
	for _, s := range n.pds {
		n.pdsURLs = append(n.pdsURLs, base(s))
	}
	for _, s := range append([]*httptest.Server{n.plc, n.relay, n.jetstream}, n.pds...) {
		s.Start()
	}
	return n, nil
}

// World returns the served world.
func (n *Net) World() *World { return n.w }

// PLCURL is the PLC directory's base URL (GET /export, GET /<did>).
func (n *Net) PLCURL() string { return n.plcURL }

// PDSURL is PDS i's base URL (GET /xrpc/com.atproto.sync.getRepo, …).
func (n *Net) PDSURL(i int) string { return n.pdsURLs[i] }

// RelayURL is the relay's base URL (GET /xrpc/com.atproto.sync.listRepos).
func (n *Net) RelayURL() string { return n.relayURL }

// FirehoseURL is the relay's websocket URL: add ?cursor=<seq> to replay.
func (n *Net) FirehoseURL() string {
	return "ws" + strings.TrimPrefix(n.relayURL, "http") + "/xrpc/com.atproto.sync.subscribeRepos"
}

// JetstreamURL is the Jetstream websocket URL: add ?cursor=<time_us>,
// compress=true, wantedCollections=, wantedDids=.
func (n *Net) JetstreamURL() string {
	return "ws" + strings.TrimPrefix(n.jetstreamURL, "http") + "/subscribe"
}

// endpoint maps PDS i to its served URL.
func (n *Net) endpoint(i int) string { return n.pdsURLs[i] }

// DIDDocument returns did's document as served, naming the PDS by its
// real URL.
func (n *Net) DIDDocument(did string) (DIDDocument, bool) { return n.w.didDocument(did, n.endpoint) }

// Close stops every server and stream and waits for their goroutines.
func (n *Net) Close() {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		close(n.closing)
		for c := range n.conns {
			c.Close()
		}
		n.mu.Unlock()
		n.wg.Wait()
		n.plc.Close()
		for _, s := range n.pds {
			s.Close()
		}
		n.relay.Close()
		n.jetstream.Close()
		n.zenc.Close()
	})
}

// ---- HTTP helpers ----

func writeJSON(rw http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	rw.Write(b)
}

// xrpcError writes an XRPC error body {"error", "message"}. The reference
// PDS answers the getRepo errors (RepoNotFound, RepoTakendown,
// RepoDeactivated) with 400, as every InvalidRequest.
func xrpcError(rw http.ResponseWriter, status int, name, msg string) {
	writeJSON(rw, status, map[string]string{"error": name, "message": msg})
}

func getOnly(rw http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		xrpcError(rw, http.StatusMethodNotAllowed, "MethodNotAllowed", "GET only")
		return false
	}
	return true
}

// ---- PLC directory ----

// servePLC serves GET /export?after=<seq>&count=<n> (JSON lines), GET
// /<did> (DID document, did:plc and, as a resolver hook, did:web) and GET
// /.well-known/did.json (the did:web document of the request's Host).
func (n *Net) servePLC(rw http.ResponseWriter, r *http.Request) {
	if !getOnly(rw, r) {
		return
	}
	switch p := r.URL.Path; {
	case p == "/export":
		q := r.URL.Query()
		after, count := int64(0), 10
		if s := q.Get("after"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				writeJSON(rw, http.StatusBadRequest, map[string]string{"message": "invalid after"})
				return
			}
			after = v
		}
		if s := q.Get("count"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 {
				writeJSON(rw, http.StatusBadRequest, map[string]string{"message": "invalid count"})
				return
			}
			count = min(v, plcExportMax)
		}
		rw.Header().Set("Content-Type", "application/jsonlines")
		rw.Write(n.w.plcExport(after, count, n.endpoint))
	case p == "/.well-known/did.json":
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		n.serveDIDDoc(rw, "did:web:"+host)
	case strings.HasPrefix(p, "/did:") && !strings.Contains(p[1:], "/"):
		n.serveDIDDoc(rw, p[1:])
	default:
		writeJSON(rw, http.StatusNotFound, map[string]string{"message": "not found"})
	}
}

func (n *Net) serveDIDDoc(rw http.ResponseWriter, did string) {
	doc, ok := n.DIDDocument(did)
	if !ok {
		writeJSON(rw, http.StatusNotFound, map[string]string{"message": "DID not registered: " + did})
		return
	}
	b, err := json.Marshal(doc)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/did+ld+json")
	rw.Write(b)
}

// ---- PDS ----

// servePDS serves, for the accounts on PDS i: com.atproto.sync.getRepo,
// listRepos, getLatestCommit and getRepoStatus.
func (n *Net) servePDS(i int, rw http.ResponseWriter, r *http.Request) {
	if !getOnly(rw, r) {
		return
	}
	did := r.URL.Query().Get("did")
	onPDS := func() (Account, bool) {
		a, ok := n.w.Account(did)
		if !ok || a.PDS != i {
			xrpcError(rw, http.StatusBadRequest, "RepoNotFound", "Could not find repo for DID: "+did)
			return a, false
		}
		return a, true
	}
	switch r.URL.Path {
	case "/xrpc/com.atproto.sync.getRepo":
		if _, ok := onPDS(); !ok {
			return
		}
		n.serveRepoCAR(rw, did)
	case "/xrpc/com.atproto.sync.getLatestCommit":
		a, ok := onPDS()
		if !ok {
			return
		}
		if err := statusErr(a.Status); err != nil {
			xrpcError(rw, http.StatusBadRequest, err.Error(), repoErrMessage(err, did))
			return
		}
		writeJSON(rw, http.StatusOK, map[string]string{"cid": a.Head, "rev": a.Rev})
	case "/xrpc/com.atproto.sync.getRepoStatus":
		n.serveRepoStatus(rw, r, i)
	case "/xrpc/com.atproto.sync.listRepos":
		n.serveListRepos(rw, r, i)
	case "/xrpc/_health":
		writeJSON(rw, http.StatusOK, map[string]string{"version": "simnet"})
	default:
		xrpcError(rw, http.StatusNotImplemented, "MethodNotImplemented", "Method Not Implemented")
	}
}

func statusErr(status string) error {
	switch status {
	case StatusDeleted:
		return ErrRepoNotFound
	case StatusTakendown:
		return ErrRepoTakendown
	case StatusDeactivated:
		return ErrRepoDeactivated
	}
	return nil
}

func repoErrMessage(err error, did string) string {
	switch {
	case errors.Is(err, ErrRepoTakendown):
		return "Repo has been takendown: " + did
	case errors.Is(err, ErrRepoDeactivated):
		return "Repo has been deactivated: " + did
	}
	return "Could not find repo for DID: " + did
}

// serveRepoStatus serves com.atproto.sync.getRepoStatus for the accounts
// of PDS pds (all accounts when pds < 0).
func (n *Net) serveRepoStatus(rw http.ResponseWriter, r *http.Request, pds int) {
	did := r.URL.Query().Get("did")
	a, ok := n.w.Account(did)
	if !ok || (pds >= 0 && a.PDS != pds) {
		xrpcError(rw, http.StatusBadRequest, "RepoNotFound", "Could not find repo for DID: "+did)
		return
	}
	out := map[string]any{"did": a.DID, "active": a.Active()}
	if a.Status != "" {
		out["status"] = a.Status
	} else {
		out["rev"] = a.Rev
	}
	writeJSON(rw, http.StatusOK, out)
}

type listedRepo struct {
	DID    string `json:"did"`
	Head   string `json:"head"`
	Rev    string `json:"rev"`
	Active bool   `json:"active"`
	Status string `json:"status,omitempty"`
}

// serveListRepos serves com.atproto.sync.listRepos, in creation order,
// over the accounts of PDS pds, except deleted ones (a PDS forgets them),
// or, when pds < 0 (the relay), over all accounts, deleted ones included
// with active false and status "deleted". The cursor is the index of the
// last account returned; it is set only when more accounts follow.
func (n *Net) serveListRepos(rw http.ResponseWriter, r *http.Request, pds int) {
	q := r.URL.Query()
	limit, start := 500, 0
	if s := q.Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > listReposMax {
			xrpcError(rw, http.StatusBadRequest, "InvalidRequest", "limit must be 1 to 1000")
			return
		}
		limit = v
	}
	if s := q.Get("cursor"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			xrpcError(rw, http.StatusBadRequest, "InvalidRequest", "bad cursor")
			return
		}
		start = v + 1
	}
	accts := n.w.Accounts()
	out := struct {
		Cursor string       `json:"cursor,omitempty"`
		Repos  []listedRepo `json:"repos"`
	}{Repos: []listedRepo{}}
	for i := start; i < len(accts); i++ {
		a := accts[i]
		if pds >= 0 && (a.PDS != pds || a.Status == StatusDeleted) {
			continue
		}
		if len(out.Repos) == limit {
			out.Cursor = strconv.Itoa(i - 1)
			// i-1 may be an account of another PDS: the next page starts
			// after it all the same.
			break
		}
		out.Repos = append(out.Repos, listedRepo{DID: a.DID, Head: a.Head, Rev: a.Rev, Active: a.Active(), Status: a.Status})
	}
	writeJSON(rw, http.StatusOK, out)
}

// ---- relay ----

// serveRelay serves com.atproto.sync.listRepos, getRepoStatus and getRepo
// over all accounts, listHosts, and the firehose,
// com.atproto.sync.subscribeRepos.
//
// listHosts names one host: the relay itself (its 127.0.0.1:port), which
// serves every account's listRepos and getRepo. A crawler that walks
// listHosts and then each host's listRepos and getRepo (Jetstream v2's)
// reaches every repository through it: the PDS servers' own ports are
// not host names a crawler accepts (no ports, no IP literals), while a
// relay's own loopback host is (as in Jetstream's own simulator).
func (n *Net) serveRelay(rw http.ResponseWriter, r *http.Request) {
	if !getOnly(rw, r) {
		return
	}
	switch r.URL.Path {
	case "/xrpc/com.atproto.sync.listHosts":
		n.serveListHosts(rw, r)
	case "/xrpc/com.atproto.sync.getRepo":
		n.serveRepoCAR(rw, r.URL.Query().Get("did"))
	case "/xrpc/com.atproto.sync.listRepos":
		n.serveListRepos(rw, r, -1)
	case "/xrpc/com.atproto.sync.getRepoStatus":
		n.serveRepoStatus(rw, r, -1)
	case "/xrpc/com.atproto.sync.subscribeRepos":
		n.serveFirehose(rw, r)
	case "/xrpc/_health":
		writeJSON(rw, http.StatusOK, map[string]string{"version": "simnet"})
	default:
		xrpcError(rw, http.StatusNotImplemented, "MethodNotImplemented", "Method Not Implemented")
	}
}

// serveRepoCAR answers com.atproto.sync.getRepo: did's repository as a
// CAR, or the error a PDS gives for it.
func (n *Net) serveRepoCAR(rw http.ResponseWriter, did string) {
	car, err := n.w.RepoCAR(did)
	if err != nil {
		xrpcError(rw, http.StatusBadRequest, err.Error(), repoErrMessage(err, did))
		return
	}
	rw.Header().Set("Content-Type", "application/vnd.ipld.car")
	rw.Write(car)
}

// serveListHosts answers com.atproto.sync.listHosts: one page, one host
// (the relay's own authority; see serveRelay), with the relay's latest
// sequence number and the accounts not deleted.
func (n *Net) serveListHosts(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("cursor") != "" {
		writeJSON(rw, http.StatusOK, map[string]any{"hosts": []any{}})
		return
	}
	accounts := 0
	for _, a := range n.w.Accounts() {
		if a.Status != StatusDeleted {
			accounts++
		}
	}
	host := strings.TrimPrefix(n.relayURL, "http://")
	writeJSON(rw, http.StatusOK, map[string]any{"hosts": []map[string]any{{
		"hostname": host, "seq": n.w.LastSeq(), "accountCount": accounts, "status": "active",
	}}})
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 64 << 10,
	CheckOrigin:     func(*http.Request) bool { return true },
}

// stream is one websocket subscription.
type stream struct {
	n    *Net
	conn *websocket.Conn
	gone chan struct{} // closed when the client goes away
}

// open upgrades the request and registers the connection; nil when the
// upgrade failed or Net is closing.
func (n *Net) open(rw http.ResponseWriter, r *http.Request) *stream {
	conn, err := upgrader.Upgrade(rw, r, nil)
	if err != nil {
		return nil // Upgrade has answered
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		conn.Close()
		return nil
	}
	n.conns[conn] = struct{}{}
	n.wg.Add(2)
	n.mu.Unlock()
	s := &stream{n: n, conn: conn, gone: make(chan struct{})}
	conn.SetReadLimit(4096)
	go func() {
		// Clients send nothing that matters; reading notices them leave
		// (and answers pings and close frames).
		defer n.wg.Done()
		defer close(s.gone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	return s
}

// close ends the stream: the handler's last call.
func (s *stream) close() {
	s.n.mu.Lock()
	delete(s.n.conns, s.conn)
	s.n.mu.Unlock()
	s.conn.Close()
	s.n.wg.Done()
}

func (s *stream) write(kind int, msg []byte) error {
	s.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	return s.conn.WriteMessage(kind, msg)
}

// follow feeds every event from index next of the log to send, then
// waits for more, until the client leaves, Net closes or send fails.
func (s *stream) follow(next int, send func(ev *simEvent) error) {
	for {
		evs, more := s.n.w.snapshot()
		for ; next < len(evs); next++ {
			if err := send(evs[next]); err != nil {
				return
			}
		}
		select {
		case <-more:
		case <-s.gone:
			return
		case <-s.n.closing:
			return
		}
	}
}

// errorFrame is a firehose error frame: header {op: -1}, body {error,
// message}.
func errorFrame(name, msg string) []byte {
	b := make(cbor, 0, 64+len(msg))
	b = b.mapHeader(1).text("op").int(-1)
	return b.mapHeader(2).text("error").text(name).text("message").text(msg)
}

// serveFirehose streams frames: with ?cursor=N every event of seq > N
// first (cursor 0 replays the whole log), then live events; without a
// cursor, live events only. A cursor beyond the latest seq gets a
// FutureCursor error frame.
func (n *Net) serveFirehose(rw http.ResponseWriter, r *http.Request) {
	cursor := int64(-1)
	if c := r.URL.Query().Get("cursor"); c != "" {
		v, err := strconv.ParseInt(c, 10, 64)
		if err != nil || v < 0 {
			xrpcError(rw, http.StatusBadRequest, "InvalidRequest", "bad cursor")
			return
		}
		cursor = v
	}
	// The start is fixed before the stream is registered: a client that
	// sees itself subscribed has every later event coming.
	last := n.w.LastSeq()
	s := n.open(rw, r)
	if s == nil {
		return
	}
	defer s.close()
	if cursor > last {
		s.write(websocket.BinaryMessage, errorFrame("FutureCursor", "Cursor in the future."))
		return
	}
	next := last
	if cursor >= 0 {
		next = cursor
	}
	if oldest := n.firehoseOldest.Load(); cursor >= 0 && cursor < oldest-1 {
		b := make(cbor, 0, 64)
		b = b.mapHeader(2).text("name").text("OutdatedCursor").text("message").text("Requested cursor exceeded limit. Possibly missing events")
		if err := s.write(websocket.BinaryMessage, append(frameHeader("#info"), b...)); err != nil {
			return
		}
		next = oldest - 1
	}
	s.follow(int(next), func(ev *simEvent) error {
		return s.write(websocket.BinaryMessage, ev.frame())
	})
}

// ---- Jetstream ----

// serveJetstream streams Jetstream v1 events: with ?cursor=<time_us>
// every event at or after it first, then live ones; without, live only.
// compress=true (or the header Socket-Encoding: zstd) sends each event as
// a zstd frame made with Jetstream's dictionary, in a binary message;
// otherwise JSON in a text message. wantedCollections (NSIDs, or prefixes
// ending ".*") filters commit events; wantedDids filters all events.
func (n *Net) serveJetstream(rw http.ResponseWriter, r *http.Request) {
	if !getOnly(rw, r) {
		return
	}
	if r.URL.Path != "/subscribe" {
		writeJSON(rw, http.StatusNotFound, map[string]string{"error": "not found"})
		return
	}
	q := r.URL.Query()
	cursor := int64(-1)
	if c := q.Get("cursor"); c != "" {
		v, err := strconv.ParseInt(c, 10, 64)
		if err != nil || v < 0 {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "invalid cursor"})
			return
		}
		cursor = v
	}
	compress := q.Get("compress") == "true" || r.Header.Get("Socket-Encoding") == "zstd"
	wantColl := q["wantedCollections"]
	wantDID := make(map[string]bool)
	for _, d := range q["wantedDids"] {
		wantDID[d] = true
	}
	keepColl := func(c string) bool {
		if len(wantColl) == 0 {
			return true
		}
		for _, p := range wantColl {
			if p == c || (strings.HasSuffix(p, ".*") && strings.HasPrefix(c, p[:len(p)-1])) {
				return true
			}
		}
		return false
	}
	evs, _ := n.w.snapshot()
	s := n.open(rw, r)
	if s == nil {
		return
	}
	defer s.close()
	next := len(evs)
	if cursor >= 0 {
		next = jetstreamStart(evs, cursor)
	} else {
		cursor = 0
	}
	s.follow(next, func(ev *simEvent) error {
		if len(wantDID) > 0 && !wantDID[ev.did] {
			return nil
		}
		return ev.jetstreamOps(cursor, func(_ int64, coll string, msg []byte) error {
			if coll != "" && !keepColl(coll) {
				return nil
			}
			if compress {
				return s.write(websocket.BinaryMessage, n.zenc.EncodeAll(msg, nil))
			}
			return s.write(websocket.TextMessage, msg)
		})
	})
}
