package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
)

// Certificates: a cluster has its own CA; each node has a certificate signed
// by it whose common name is the node ID, valid for both server and client
// authentication, so Raft connections are mutually authenticated and the
// peer's node ID is known.

// certValidity is how long generated certificates last.
const certValidity = 5 * 365 * 24 * time.Hour

// CertFiles names a node's PEM files.
type CertFiles struct {
	CA, Cert, Key string
}

// Files returns the conventional file names in dir for node id (the CA is
// ca.pem; a node's certificate <id>.pem and key <id>-key.pem).
func Files(dir, id string) CertFiles {
	return CertFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, id+".pem"), Key: filepath.Join(dir, id+"-key.pem")}
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// MakeCA writes ca.pem and ca-key.pem into dir (refusing to overwrite).
func MakeCA(dir string) error {
	k, keyPEM, err := newKey()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "eddy cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, "ca-key.pem"), keyPEM, 0o600)
}

// MakeNodeCert writes <id>.pem and <id>-key.pem into dir, signed by the CA in
// dir, valid for the given host names and IP addresses.
func MakeNodeCert(dir, id string, hosts []string) error {
	caCert, caKey, err := loadCA(dir)
	if err != nil {
		return err
	}
	k, keyPEM, err := newKey()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: id},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		return err
	}
	f := Files(dir, id)
	if err := writeNew(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeNew(f.Key, keyPEM, 0o600)
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return nil, nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, nil, errors.New("CA files are not PEM")
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func writeNew(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LoadTLS builds the mutual-TLS configuration of a node: it presents its
// certificate, and requires and verifies the peer's against the CA, both as
// a server and as a client. accept, if not nil, is asked about every peer's
// node ID (its certificate's common name) after verification.
func LoadTLS(f CertFiles, accept func(peerID string) error) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("load node certificate: %w", err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("CA file holds no certificate")
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
	if accept != nil {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no peer certificate")
			}
			return accept(cs.PeerCertificates[0].Subject.CommonName)
		}
	}
	return cfg, nil
}

// tlsStream is a raft.StreamLayer over mutual TLS.
type tlsStream struct {
	net.Listener
	advertise net.Addr
	source    *net.TCPAddr // the local address dials leave from; nil: any
	client    *tls.Config
	// block, when set (tests only), cuts this node off from peers: it
	// refuses dials to their addresses and drops their inbound connections.
	block func(peerID, addr string) bool
}

// Accept returns the next inbound connection; with a block hook set it
// completes the handshake first to learn the peer's ID.
func (s *tlsStream) Accept() (net.Conn, error) {
	for {
		c, err := s.Listener.Accept()
		if err != nil || s.block == nil {
			return c, err
		}
		tc := c.(*tls.Conn)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			continue
		}
		tc.SetDeadline(time.Time{})
		peer := ""
		if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
			peer = pc[0].Subject.CommonName
		}
		if s.block(peer, "") {
			c.Close()
			continue
		}
		return &blockConn{Conn: c, blocked: func() bool { return s.block(peer, "") }}, nil
	}
}

// blockConn fails reads and writes once its peer is blocked (tests only),
// so a partition also cuts connections that were open before it.
type blockConn struct {
	net.Conn
	blocked func() bool
}

var errPartitioned = errors.New("partitioned (test)")

func (c *blockConn) Read(p []byte) (int, error) {
	if c.blocked() {
		c.Conn.Close()
		return 0, errPartitioned
	}
	return c.Conn.Read(p)
}

func (c *blockConn) Write(p []byte) (int, error) {
	if c.blocked() {
		c.Conn.Close()
		return 0, errPartitioned
	}
	return c.Conn.Write(p)
}

var _ raft.StreamLayer = (*tlsStream)(nil)

func newTLSStream(bind string, advertise net.Addr, cfg *tls.Config) (*tlsStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	return &tlsStream{Listener: tls.NewListener(ln, cfg), advertise: advertise, client: cfg}, nil
}

func (s *tlsStream) Addr() net.Addr { return s.advertise }

func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.block != nil && s.block("", string(addr)) {
		return nil, errPartitioned
	}
	d := &net.Dialer{Timeout: timeout}
	if s.source != nil {
		d.LocalAddr = s.source
	}
	c := s.client.Clone()
	host, _, err := net.SplitHostPort(string(addr))
	if err != nil {
		return nil, err
	}
	c.ServerName = host
	conn, err := tls.DialWithDialer(d, "tcp", string(addr), c)
	if err != nil || s.block == nil {
		return conn, err
	}
	return &blockConn{Conn: conn, blocked: func() bool { return s.block("", string(addr)) }}, nil
}

// sourceAddr parses a node's source address (an IP; "" for the system's
// choice).
func sourceAddr(ip string) (*net.TCPAddr, error) {
	if ip == "" {
		return nil, nil
	}
	a := net.ParseIP(ip)
	if a == nil {
		return nil, fmt.Errorf("cluster: source address %q is not an IP", ip)
	}
	return &net.TCPAddr{IP: a}, nil
}

// HTTPClient returns an HTTP client for calls to peers, its connections
// leaving from source (an IP; "" for the system's choice).
func HTTPClient(source string, timeout time.Duration) (*http.Client, error) {
	la, err := sourceAddr(source)
	if err != nil {
		return nil, err
	}
	if la == nil {
		return &http.Client{Timeout: timeout}, nil
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: la}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = d.DialContext
	return &http.Client{Timeout: timeout, Transport: tr}, nil
}
