package query

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/eddy-backlinks/eddy/internal/corrupt"
	"github.com/eddy-backlinks/eddy/link"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/objstore"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits of the public API.
const (
	// DefaultLimit and LimitMax bound a page of links.
	DefaultLimit = 100
	LimitMax     = lsm.LimitMax
	// ConcurrentQueriesMax bounds the queries a node answers at once;
	// past it a query is answered 429 at once rather than queued. A query
	// waiting for its minGeneration, or for the memory of large reads, is
	// not among them.
	ConcurrentQueriesMax = 64
	// QueryTimeout bounds one query.
	QueryTimeout = 10 * time.Second
	// MinGenerationWaitMax bounds how long a query asking for a newer
	// generation than the node serves waits before a 503.
	MinGenerationWaitMax = 5 * time.Second
	// paramBytesMax bounds a query parameter; targetParamBytesMax one
	// that names a target (targetParams), which may be a normalised form
	// up to link.NormBytesMax.
	paramBytesMax       = link.TargetBytesMax + 64
	targetParamBytesMax = link.NormBytesMax
	// fromDIDsBytesMax bounds /links's from_dids, DIDsMax DIDs in one
	// comma-separated value: as many as did takes repeated, each up to
	// paramBytesMax (the request's header bound, 1 MB, comes first).
	fromDIDsBytesMax = DIDsMax * (paramBytesMax + 1)
	// ResponseBytesMax bounds an answer's body; a query whose answer would
	// be larger gets 400 QueryTooBig. The page limits keep every answer
	// well under it (about 4.4 MB for the worst listBacklinks page: 1,000
	// at-uris of the longest DIDs, collections and record keys).
	ResponseBytesMax = 8 << 20
	// LinksAllEntriesMax bounds the collection and path pairs of one
	// /links/all answer (past it: 400 QueryTooBig).
	LinksAllEntriesMax = 1000
)

// singleParams may appear at most once in any query; subject, source,
// did, linkDid and otherSubject repeat where an endpoint takes several
// (each endpoint checks its own).
var singleParams = []string{"target", "collection", "path", "pathToOther", "limit", "cursor", "reverse", "minGeneration", "from_dids", "allowStale"}

// GenerationHeader names the manifest generation that answered.
const GenerationHeader = "X-Eddy-Generation"

// StaleHeader is on an answer a node gave with allowStale=true while it
// was not ready (catching up, or fallen behind the cluster): why it was
// not; and on every answer of a node that cannot tell how old its view is
// (Server.Unsure: cut off from every leader).
const StaleHeader = "X-Eddy-Stale"

// Server serves the query API.
type Server struct {
	Views  *Views
	Reader *lsm.Reader
	Codec  *link.Codec // read-only: Outlines from the replicated state
	Log    hclog.Logger
	// Ready, when set, gates every query: while it returns an error the
	// node answers 503 NotReady (a restarted node catching up with the
	// cluster), so a client asks another node rather than get a stale answer.
	Ready func() error
	// Unsure, when set, says why the node cannot vouch for its view's age
	// ("": it can): a node that has heard from no leader for a while (two
	// voters of three down, a partition) still answers from its view,
	// rather than leave clients nothing, and says so in StaleHeader;
	// /readyz steers health-checked traffic to other nodes meanwhile.
	Unsure func() string
	// ResponseBytesMax bounds an answer's body (default: ResponseBytesMax).
	ResponseBytesMax int
	// Corrupt, when set, counts the corrupt tables queries meet
	// (Metrics.Corrupt); each is logged with its table either way.
	Corrupt *prometheus.CounterVec
	// MissingTable, when set, counts the queries that met a table object
	// missing from the store (Metrics.MissingTable); each is logged.
	MissingTable prometheus.Counter
	// StoreUnavailable, when set, counts the queries answered 503
	// StoreUnavailable (Metrics.StoreUnavailable).
	StoreUnavailable prometheus.Counter
	// Busy, when set, counts the queries answered 503 Busy
	// (Metrics.Busy).
	Busy prometheus.Counter
	// MinGenerationWait bounds a query's wait for the generation its
	// minGeneration asks for (default MinGenerationWaitMax).
	MinGenerationWait time.Duration
	// Clients, when set, bounds each client's queries (its rate and its
	// queries in flight) before anything else is done for them.
	Clients *ClientLimiter
	sem     chan struct{}
	// totals are getBacklinks' totals of popular targets, and dids the
	// distinct accounts of popular subjects, per view (viewCache).
	totals viewCache[uint64]
	dids   viewCache[[]uint64]
}

// NewServer returns a query server.
func NewServer(views *Views, reader *lsm.Reader, codec *link.Codec, log hclog.Logger) *Server {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Server{Views: views, Reader: reader, Codec: codec, Log: log.Named("query"), sem: make(chan struct{}, ConcurrentQueriesMax),
		totals: newViewCache(countCacheEntriesMax, func(uint64) int { return 1 }),
		dids:   newViewCache(didsCacheBytesMax, func(d []uint64) int { return 8*cap(d) + didsCacheEntryBytes }),
	}
}

// endpoint is one path of the public API.
type endpoint struct {
	path string
	h    handler
}

func (s *Server) endpoints() []endpoint {
	return []endpoint{
		{"/xrpc/blue.cerulea.backlinks.listBacklinks", s.listBacklinks},
		{"/xrpc/blue.microcosm.links.getBacklinks", s.getBacklinks},
		{"/xrpc/blue.microcosm.links.getBacklinksCount", s.getBacklinksCount},
		{"/xrpc/blue.microcosm.links.getBacklinkDids", s.getBacklinkDids},
		{"/xrpc/blue.microcosm.links.getManyToManyCounts", s.getManyToManyCounts},
		{"/xrpc/blue.microcosm.links.getManyToMany", s.getManyToMany},
		{"/links", s.links},
		{"/links/count", s.linksCount},
		{"/links/count/distinct-dids", s.linksCountDistinctDids},
		{"/links/distinct-dids", s.linksDistinctDids},
		{"/links/all", s.linksAll},
		{"/links/all/count", s.linksAllCount},
	}
}

// Handler returns the HTTP handler of the public API. Every answer is a
// JSON body (the index page is HTML when asked for): an unknown XRPC
// method is 501 MethodNotImplemented, a known path asked with another HTTP
// method than GET is 405, any other path 404 NotFound.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, e := range s.endpoints() {
		mux.HandleFunc(e.path, getOnly(s.wrap(e.h)))
	}
	mux.HandleFunc("/xrpc/_health", getOnly(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"generation": s.Views.Current().Generation()})
	}))
	mux.HandleFunc("/{$}", getOnly(s.hello))
	mux.HandleFunc("/robots.txt", getOnly(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "User-agent: *\nDisallow: /links\nDisallow: /xrpc/\n")
	}))
	mux.HandleFunc("/xrpc/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, &apiError{http.StatusNotImplemented, "MethodNotImplemented", "no method " + strings.TrimPrefix(r.URL.Path, "/xrpc/") + " on this service"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, &apiError{http.StatusNotFound, "NotFound", "no such path: " + r.URL.Path})
	})
	return cors(mux)
}

// getOnly answers 405 (with an XRPC body) to any HTTP method but GET and
// HEAD.
func getOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeErr(w, &apiError{http.StatusMethodNotAllowed, "InvalidRequest", "method " + r.Method + " not allowed: this is a query, use GET"})
			return
		}
		h(w, r)
	}
}

// GetOnly is getOnly for the node's other public paths (/metrics,
// /healthz, /readyz), so that they answer other methods as the query API
// does.
func GetOnly(h http.Handler) http.Handler { return getOnly(h.ServeHTTP) }

// exposedHeaders are the headers of an answer a page on another origin may
// read (cors, and the refused connection's 429).
const exposedHeaders = GenerationHeader + ", " + StaleHeader + ", Retry-After"

func cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
		w.Header().Set("Access-Control-Allow-Headers", "*")
		// Retry-After is not among the headers a browser shows a page
		// from another origin unless named: the 429s and 503s carry it.
		w.Header().Set("Access-Control-Expose-Headers", exposedHeaders)
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// apiError is an XRPC error.
type apiError struct {
	status  int
	name    string
	message string
}

func (e *apiError) Error() string { return e.name + ": " + e.message }

func badRequest(msg string) *apiError { return &apiError{http.StatusBadRequest, "InvalidRequest", msg} }

// filterParams are the repeatable filters whose values are trimmed of
// spaces, an empty one dropped, as Constellation does: a client that
// sends an unset filter as did= asks for no filter, not for a DID "".
var filterParams = [...]string{"did", "linkDid", "otherSubject"}

// trimFilters trims q's filterParams values and drops the empty ones;
// it reports whether it changed q.
func trimFilters(q url.Values) bool {
	changed := false
	for _, k := range filterParams {
		vs, ok := q[k]
		if !ok {
			continue
		}
		var kept []string
		for _, v := range vs {
			if t := strings.TrimSpace(v); t != "" {
				kept = append(kept, t)
			}
		}
		if slices.Equal(kept, vs) {
			continue
		}
		changed = true
		if len(kept) == 0 {
			delete(q, k)
		} else {
			q[k] = kept
		}
	}
	return changed
}

// targetParams name targets: their values may be as long as a target's
// normalised form (link.ParseNormalTarget).
var targetParams = [...]string{"target", "subject", "otherSubject"}

// checkParams applies the checks every query's parameters pass, whatever
// its endpoint takes (a parameter it does not take too): the query string
// is well formed, every value of every parameter is UTF-8 and at most
// paramBytesMax bytes (targetParams targetParamBytesMax, from_dids
// fromDIDsBytesMax), and each of singleParams is given at most once. It
// reads allowStale.
func checkParams(q url.Values, qerr error) (allowStale bool, _ *apiError) {
	if qerr != nil {
		return false, badRequest("the query string is malformed: " + qerr.Error())
	}
	for k, vs := range q {
		bound := paramBytesMax
		switch {
		case k == "from_dids":
			bound = fromDIDsBytesMax
		case slices.Contains(targetParams[:], k):
			bound = targetParamBytesMax
		}
		for _, v := range vs {
			if len(v) > bound {
				return false, badRequest("parameter " + k + " is too long")
			}
			if !utf8.ValidString(v) {
				return false, badRequest("parameter " + k + " is not valid UTF-8")
			}
		}
	}
	for _, k := range singleParams {
		if len(q[k]) > 1 {
			return false, badRequest("parameter " + k + " is given " + strconv.Itoa(len(q[k])) + " times; at most once")
		}
	}
	switch q.Get("allowStale") {
	case "", "false":
	case "true":
		allowStale = true
	default:
		return false, badRequest("allowStale must be true or false")
	}
	return allowStale, nil
}

// nodeSlot is a query's hold on one of the node's ConcurrentQueriesMax
// query slots (Server.sem), which it gives back while a read of a large
// target waits (waitHooks).
type nodeSlot struct {
	sem  chan struct{}
	mu   sync.Mutex
	held bool
}

// tryTake takes a slot if one is free.
func (n *nodeSlot) tryTake() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case n.sem <- struct{}{}:
		n.held = true
		return true
	default:
		return false
	}
}

// take takes a slot again after a wait, waiting for one up to SlotWaitMax
// (errSlotWait past it) or the end of ctx.
func (n *nodeSlot) take(ctx context.Context) error {
	t := time.NewTimer(SlotWaitMax)
	defer t.Stop()
	select {
	case n.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errSlotWait
	}
	n.mu.Lock()
	n.held = true
	n.mu.Unlock()
	return nil
}

// leave gives the slot back, if held.
func (n *nodeSlot) leave() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.held {
		n.held = false
		<-n.sem
	}
}

// waitHooks let a query's reads of large targets give back its node-wide
// slot and its execution slot (adm: nil without client limits) while they
// wait for their share of lsm's bound on their memory: both are left when
// the first of them waits, and taken again, the node-wide one first, when
// the last is done waiting, so reads of one query at once never take two
// of either.
func waitHooks(ns *nodeSlot, adm *admission) lsm.WaitHooks {
	var mu sync.Mutex
	waiting := 0
	return lsm.WaitHooks{
		Leave: func() {
			mu.Lock()
			defer mu.Unlock()
			if waiting++; waiting == 1 {
				adm.leaveSlot()
				ns.leave()
			}
		},
		Back: func(ctx context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if waiting--; waiting > 0 {
				return nil
			}
			if err := ns.take(ctx); err != nil {
				return err
			}
			if adm != nil {
				return adm.run(ctx)
			}
			return nil
		},
	}
}

type handler func(ctx context.Context, r *http.Request, v *lsm.View) (any, error)

// wrap applies the client limits, the parameter checks, readiness (and
// allowStale), the timeout, the minimum generation, the node-wide bound
// on queries, the execution slots, the generation header and XRPC error
// bodies.
func (s *Server) wrap(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Every answer carries a generation: the one the node serves until
		// a view is taken (an answer refused before, as a bad parameter or
		// a node not ready, says what the node serves).
		w.Header().Set(GenerationHeader, strconv.FormatUint(s.Views.Current().Generation(), 10))
		// A ';' is a character of a value, as in Constellation (URLs hold
		// them), not a separator: Go's parser would refuse the query.
		if strings.Contains(r.URL.RawQuery, ";") {
			r.URL.RawQuery = strings.ReplaceAll(r.URL.RawQuery, ";", "%3B") // the handlers read the query again
		}
		// Parsed once for every step below; a malformed query string is
		// refused after the client limits (it costs its client a token).
		q, qerr := url.ParseQuery(r.URL.RawQuery)
		var adm *admission
		if s.Clients != nil {
			var refused *limitError
			adm, refused = s.Clients.acquire(r, q)
			if refused != nil {
				if d := s.Clients.lim.RefusalDelay; d > 0 {
					t := time.NewTimer(refusalWait(d))
					select {
					case <-t.C:
					case <-r.Context().Done():
					}
					t.Stop()
				}
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(refused.retry.Seconds())))))
				writeErr(w, refused.ae)
				return
			}
			defer adm.release()
		}
		allowStale, perr := checkParams(q, qerr)
		if perr != nil {
			writeErr(w, perr)
			return
		}
		if s.Ready != nil {
			if err := s.Ready(); err != nil {
				if !allowStale {
					w.Header().Set("Retry-After", "1")
					writeErr(w, &apiError{http.StatusServiceUnavailable, "NotReady", "this node is catching up with the cluster, or has fallen behind it (" + err.Error() + "); ask another node, or ask again with allowStale=true for this node's answer"})
					return
				}
				w.Header().Set(StaleHeader, err.Error())
			}
		}
		if s.Unsure != nil && w.Header().Get(StaleHeader) == "" {
			if why := s.Unsure(); why != "" {
				w.Header().Set(StaleHeader, why)
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), QueryTimeout)
		defer cancel()
		if trimFilters(q) {
			r.URL.RawQuery = q.Encode() // the handlers read the query again
		}
		// The view is held until the answer is encoded: the leader's garbage
		// collector waits for it (Views.OldestServed). Waiting for a
		// generation holds no node-wide slot (a client's queries waiting
		// for one lock nobody else out), only the client's own in flight.
		var v *lsm.View
		var release func()
		if mg := q.Get("minGeneration"); mg != "" {
			gen, err := strconv.ParseUint(mg, 10, 64)
			if err != nil {
				writeErr(w, badRequest("minGeneration must be a non-negative integer"))
				return
			}
			wait := s.MinGenerationWait
			if wait <= 0 {
				wait = MinGenerationWaitMax
			}
			wctx, wcancel := context.WithTimeout(ctx, wait)
			v, release, err = s.Views.AcquireAtLeast(wctx, gen)
			wcancel()
			if err != nil {
				w.Header().Set("Retry-After", "1")
				w.Header().Set(GenerationHeader, strconv.FormatUint(s.Views.Current().Generation(), 10)) // what it serves now, after the wait
				writeErr(w, &apiError{http.StatusServiceUnavailable, "GenerationNotReady", "this node has not applied generation " + mg + " yet; retry"})
				return
			}
		} else {
			v, release = s.Views.Acquire()
		}
		release = sync.OnceFunc(release)
		defer release()
		ns := &nodeSlot{sem: s.sem}
		if !ns.tryTake() {
			w.Header().Set("Retry-After", "1")
			writeErr(w, &apiError{http.StatusTooManyRequests, "RateLimitExceeded", "too many concurrent queries on this node; retry"})
			return
		}
		defer ns.leave()
		w.Header().Set(GenerationHeader, strconv.FormatUint(v.Generation(), 10))
		if adm != nil {
			// Answering holds an execution slot until the answer is
			// encoded (not while a slow client reads it).
			if err := adm.run(ctx); err != nil {
				w.Header().Set("Retry-After", "1")
				writeErr(w, &apiError{http.StatusTooManyRequests, "RateLimitExceeded", "this node is saturated (no execution slot within " + SlotWaitMax.String() + "); retry, or ask another node"})
				return
			}
		}
		// A read of a large target waiting for its turn (lsm's bound on
		// their memory) holds neither slot meanwhile.
		ctx = lsm.WithWaitHooks(ctx, waitHooks(ns, adm))
		ctx = context.WithValue(ctx, codecKey{}, s.Codec.WithContext(ctx))
		out, err := h(ctx, r, v)
		if err != nil {
			adm.leaveSlot()
			var ae *apiError
			if !errors.As(err, &ae) {
				ae = &apiError{http.StatusInternalServerError, "InternalServerError", "the query failed on this node"}
				switch {
				case errors.Is(err, lsm.ErrTooBig):
					ae = &apiError{http.StatusBadRequest, "QueryTooBig", err.Error()}
				case errors.Is(err, errSlotWait):
					// A read that waited for its share got no slot back.
					w.Header().Set("Retry-After", "1")
					ae = &apiError{http.StatusTooManyRequests, "RateLimitExceeded", "this node is saturated (no execution slot within " + SlotWaitMax.String() + "); retry, or ask another node"}
				case errors.Is(err, lsm.ErrBusy):
					if s.Busy != nil {
						s.Busy.Inc()
					}
					w.Header().Set("Retry-After", "1")
					ae = &apiError{http.StatusServiceUnavailable, "Busy", "this node is reading other large targets and this query's time ran out waiting for its turn; retry, or ask another node"}
				case corrupt.Note(s.Corrupt, s.Log, r.URL.Path, err):
					ae.message = "a table this node read is corrupt (counted and logged); ask another node"
				case errors.Is(err, objstore.ErrNotFound):
					w.Header().Set("Retry-After", "1")
					ae = s.missingTable(r, v, err)
				case errors.Is(err, objstore.ErrUnavailable):
					w.Header().Set("Retry-After", "1")
					ae = s.storeUnavailable(r, err)
				case ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
					// Its time ran out (or its client went): every read
					// of it, the PLC map's and the names tree's included,
					// ends with its context.
					ae.message = "the query ran out of time on this node (" + QueryTimeout.String() + ")"
					s.Log.Warn("query ran out of time", "path", r.URL.Path, "error", err)
				default:
					s.Log.Error("query failed", "path", r.URL.Path, "error", err)
				}
			}
			writeErr(w, ae)
			return
		}
		bound := s.ResponseBytesMax
		if bound <= 0 {
			bound = ResponseBytesMax
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		err = enc.Encode(out)
		adm.leaveSlot()
		if err != nil {
			s.Log.Error("encode answer", "path", r.URL.Path, "error", err)
			writeErr(w, &apiError{http.StatusInternalServerError, "InternalServerError", "the query failed on this node"})
			return
		}
		if buf.Len() > bound {
			writeErr(w, &apiError{http.StatusBadRequest, "QueryTooBig", "the answer would exceed " + strconv.Itoa(bound) + " bytes; ask for a smaller page (limit)"})
			return
		}
		// The answer is whole in buf: a client that reads it slowly, or
		// not at all, holds neither the view (which would hold back the
		// cluster's garbage collection) nor a node-wide query slot, and
		// its connection is given answerWriteTimeout to take it.
		release()
		ns.leave()
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(answerWriteTimeout))
		w.Header().Set("Content-Type", "application/json")
		w.Write(buf.Bytes())
	}
}

// answerWriteTimeout bounds the writing of one answer (at most
// ResponseBytesMax, 8 MiB: 140 KB/s): a client that stops reading loses its
// connection after it.
var answerWriteTimeout = time.Minute

// missingTable answers a query that met a table object missing from the
// store: its view is older than the garbage collector allowed for (a node
// back from a long partition serving an old manifest), or the store lost
// an object. It is counted and logged, and answered 503 TableUnavailable
// (Retry-After 1): the node moves to a newer view, another node may answer
// at once.
func (s *Server) missingTable(r *http.Request, v *lsm.View, err error) *apiError {
	if s.MissingTable != nil {
		s.MissingTable.Inc()
	}
	gen := strconv.FormatUint(v.Generation(), 10)
	if v.Generation() >= s.Views.Applied() {
		// No newer manifest to move to: the table is live, and the store
		// lost its object (deleted or damaged behind the index's back).
		s.Log.Error("query met a table of the newest generation missing from the store: the bucket lost a live object", "path", r.URL.Path, "generation", v.Generation(), "error", err)
		return &apiError{http.StatusServiceUnavailable, "TableUnavailable", "a table of generation " + gen + ", the newest this node has, is missing from the object store (logged); ask another node, whose cache may hold it"}
	}
	s.Log.Warn("query met a table missing from the store", "path", r.URL.Path, "generation", v.Generation(), "error", err)
	return &apiError{http.StatusServiceUnavailable, "TableUnavailable", "a table of generation " + gen + " is no longer in the store; retry (this node is moving to a newer manifest)"}
}

// storeUnavailable counts and logs a query the object store could not
// serve: the answer is 503, to be retried here later or on another node
// (whose cache may hold the frames).
func (s *Server) storeUnavailable(r *http.Request, err error) *apiError {
	if s.StoreUnavailable != nil {
		s.StoreUnavailable.Inc()
	}
	s.Log.Warn("query needed the object store, which did not answer", "path", r.URL.Path, "error", err)
	return &apiError{http.StatusServiceUnavailable, "StoreUnavailable", "the object store holding the index did not answer this node; retry"}
}

func writeErr(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	w.Write(e.body())
}

// body is e's XRPC error body, a JSON object ending in a newline.
func (e *apiError) body() []byte {
	b, _ := json.Marshal(map[string]string{"error": e.name, "message": e.message})
	return append(b, '\n')
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

type listBacklinksOut struct {
	Backlinks map[string][]string `json:"backlinks"`
	Cursor    *string             `json:"cursor"`
}

// listBacklinks: GET /xrpc/blue.cerulea.backlinks.listBacklinks?target=&cursor=&limit=
func (s *Server) listBacklinks(ctx context.Context, r *http.Request, v *lsm.View) (any, error) {
	q := r.URL.Query()
	limit, err := parseLimit(q)
	if err != nil {
		return nil, err
	}
	out := listBacklinksOut{Backlinks: map[string][]string{}}
	sub, err := s.parseSubject(ctx, "target", q.Get("target"))
	if err != nil {
		return nil, err
	}
	sc := newScope("listBacklinks").add("target", []string{sub.norm})
	after, aerr := decodePosCursor(q.Get("cursor"), kindLinks, false, sc)
	if aerr != nil {
		return nil, aerr
	}
	links, next, err := s.pageLinks(ctx, v, &linkQuery{known: byKey([]subject{sub})}, after, false, limit)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		src, err := s.codec(ctx).RenderRecord(l.Source)
		if err != nil {
			return nil, err
		}
		loc, err := s.codec(ctx).RenderLocation(l.Location, link.StyleDollar)
		if err != nil {
			return nil, err
		}
		out.Backlinks[loc] = append(out.Backlinks[loc], src)
	}
	out.Cursor = encodePosCursor(kindLinks, next, false, sc)
	return out, nil
}

// codecKey holds a query's codec in its context (Server.codec).
type codecKey struct{}

// codec is the codec a query renders and parses with: s.Codec with its
// reads of the PLC map and the names tree bounded by the query's context
// (wrap puts it there), so that no rendering outlives the query's 10 s.
// Within a query it is that codec whatever context derived from the
// query's is passed: a shorter deadline of a part of an answer does not
// bound its renderings (none needs one).
func (s *Server) codec(ctx context.Context) *link.Codec {
	if c, ok := ctx.Value(codecKey{}).(*link.Codec); ok {
		return c
	}
	return s.Codec.WithContext(ctx)
}
