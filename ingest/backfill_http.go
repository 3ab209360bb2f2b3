package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
)

// httpError is an answer other than 200 from a relay, a PLC directory or
// a PDS.
type httpError struct {
	status int
	// body is the answer's XRPC error and message, else the start of its
	// body: printable text of at most errorBodyMax bytes, since it goes
	// into the backfill's checkpoint and `eddy-ctl backfill status`.
	body string
	// retryAfter is the answer's Retry-After (0: none), at most
	// retryAfterMax.
	retryAfter time.Duration
	// xrpc is the answer's XRPC error name ("": not an XRPC error body).
	xrpc string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

const (
	// errorBodyMax bounds the text an error answer leaves in the state
	// (a proxy's HTML error page is kilobytes, for every repository of
	// its host).
	errorBodyMax = 256
	// retryAfterMax bounds the wait a Retry-After asks before a try.
	retryAfterMax = time.Minute
)

// newHTTPError makes the error of resp, whose body (or its start) is body.
func newHTTPError(resp *http.Response, body []byte, now time.Time) *httpError {
	var xe struct{ Error string }
	json.Unmarshal(body, &xe)
	return &httpError{status: resp.StatusCode, body: errorText(body), retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), now), xrpc: xe.Error}
}

// errorText is an error answer's XRPC "error: message", else its body's
// start, printable and at most errorBodyMax bytes.
func errorText(body []byte) string {
	s := string(body)
	var xe struct{ Error, Message string }
	if json.Unmarshal(body, &xe) == nil && xe.Error != "" {
		s = xe.Error
		if xe.Message != "" {
			s += ": " + xe.Message
		}
	}
	var b strings.Builder
	for _, r := range strings.TrimSpace(s) {
		if b.Len() >= errorBodyMax {
			b.WriteString("…")
			break
		}
		switch {
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// parseRetryAfter reads a Retry-After header (seconds, or an HTTP date),
// at most retryAfterMax; 0 when absent or unreadable.
func parseRetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(h); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), retryAfterMax)
}

// remoteClient is the client for hosts a DID document names.
func (b *Backfill) remoteClient() *http.Client {
	if b.HTTP != nil {
		return b.HTTP
	}
	b.setup()
	return b.remoteHTTP
}

// privateAllowed: b.Private, or by default whether the relay, the PLC
// directory or DIDWeb configured is on a private address.
func (b *Backfill) privateAllowed() bool {
	if b.Private != nil {
		return *b.Private
	}
	for _, raw := range []string{b.Relay, b.PLC, b.DIDWeb} {
		if u, err := url.Parse(raw); err == nil && u.Hostname() != "" {
			if u.Hostname() == "localhost" {
				return true
			}
			if a, err := netip.ParseAddr(u.Hostname()); err == nil && !publicAddr(a) {
				return true
			}
		}
	}
	return false
}

// errNotPublic: a DID document named a host on a non-public address.
var errNotPublic = errors.New("not a public address")

// publicDialer dials public addresses only: the check runs on the
// address being connected to, after name resolution, so a name that
// resolves to a private address is refused too.
func publicDialer() *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if !publicAddr(ap.Addr()) {
				return fmt.Errorf("%s: %w", address, errNotPublic)
			}
			return nil
		}}
}

// notPublic are unicast ranges that are not the public internet's (beside
// what netip calls private): carrier-grade NAT's shared space, "this
// network", benchmarking, the reserved class E, IETF protocol assignments,
// and the IPv6 prefixes that embed an IPv4 address anyone may pick
// (IPv4-compatible, NAT64, 6to4, Teredo), site-local and discard-only.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"), netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"), netip.MustParsePrefix("192.0.0.0/24"), netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("2001::/32"), netip.MustParsePrefix("fec0::/10"), netip.MustParsePrefix("100::/64"),
}

// publicAddr reports whether a is a public unicast address.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
