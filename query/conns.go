package query

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultClientConns is ClientLimits.Conns' default: four times a
// client's queries in flight, room for its idle keep-alive connections.
const DefaultClientConns = 64

// Listener bounds the connections one client keeps open to ln's server
// (ClientLimits.Conns): past the bound a new connection is not read at
// all; it is answered 429 RateLimitExceeded after the refusal delay and
// closed. A client's requests are parsed only on the connections it may
// keep, so a flooder opening hundreds of connections at once does not
// have hundreds of requests read and parsed ahead of the other clients'.
// Connections from TrustedProxies are not bounded (they carry many
// clients). l may be nil: ln is returned as it is.
func (l *ClientLimiter) Listener(ln net.Listener) net.Listener {
	if l == nil || l.lim.Conns < 0 {
		return ln
	}
	return &connLimiter{Listener: ln, l: l, conns: make(map[netip.Addr]int)}
}

type connLimiter struct {
	net.Listener
	l        *ClientLimiter
	refusing atomic.Int64 // connections being refused
	mu       sync.Mutex
	conns    map[netip.Addr]int // open connections by client
}

// refusingMax bounds the connections being refused at once (each holds a
// goroutine and a file descriptor for the refusal delay); past it a
// connection is closed at once, unanswered.
const refusingMax = 1024

// A refused connection's 429 gets refuseIOMax to be written, and then the
// client's request (at most refuseDrainMax bytes of it, discarded)
// refuseIOMax to be read until the client closes its side.
const (
	refuseIOMax    = time.Second
	refuseDrainMax = 64 << 10
)

func (c *connLimiter) Accept() (net.Conn, error) {
	for {
		conn, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := parseHostAddr(conn.RemoteAddr().String())
		if !peer.IsValid() || c.l.trusted(peer) {
			return conn, nil
		}
		key := clientKey(peer)
		c.mu.Lock()
		n := c.conns[key]
		if n >= c.l.lim.Conns {
			c.mu.Unlock()
			c.l.Limited.WithLabelValues("connections").Inc()
			if c.refusing.Add(1) > refusingMax {
				c.refusing.Add(-1)
				conn.Close()
				continue
			}
			go c.refuse(conn, n)
			continue
		}
		c.conns[key] = n + 1
		c.mu.Unlock()
		return &limitedConn{Conn: conn, release: func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.conns[key]--; c.conns[key] <= 0 {
				delete(c.conns, key)
			}
		}}, nil
	}
}

// refuse answers a connection past its client's bound 429, after the
// refusal delay (the request, if any, is never read), and closes it.
func (c *connLimiter) refuse(conn net.Conn, open int) {
	defer c.refusing.Add(-1)
	defer conn.Close()
	if d := c.l.lim.RefusalDelay; d > 0 {
		time.Sleep(refusalWait(d))
	}
	body := (&apiError{http.StatusTooManyRequests, "RateLimitExceeded", "this client has " + strconv.Itoa(open) + " connections open to this node, its most; reuse them"}).body()
	conn.SetWriteDeadline(time.Now().Add(refuseIOMax))
	if _, err := conn.Write(append([]byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"+
		// as cors() answers, so that a page's script can read the refusal
		"Access-Control-Allow-Origin: *\r\nAccess-Control-Expose-Headers: "+exposedHeaders+"\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body...)); err != nil {
		return
	}
	// Closing with the request unread would send a reset, and a client
	// may then lose the answer: end the writing side, and read what the
	// client sent (bounded) until it closes its side, as net/http does.
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		conn.SetReadDeadline(time.Now().Add(refuseIOMax))
		io.Copy(io.Discard, io.LimitReader(conn, refuseDrainMax))
	}
}

// limitedConn is a connection counted against its client until closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// CloseWrite ends the connection's writing side (net/http does so before
// it closes a connection whose request it did not read whole).
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// clientKey is the client an address counts as: itself, or an IPv6
// address's /64.
func clientKey(a netip.Addr) netip.Addr {
	if a.Is6() {
		if p, err := a.WithZone("").Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return a
}
