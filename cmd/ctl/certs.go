package main

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/eddy-backlinks/eddy/cluster"
)

func init() {
	register("certs", command{
		summary: "make the cluster CA, node certificates and admin token: certs --dir DIR --nodes n1,n2,n3 [--hosts h1,h2]",
		run:     runCerts,
	})
}

const certsUsage = `Usage: eddy-ctl certs --dir DIR --nodes n1,n2,n3 [--hosts 10.0.0.1,node1.example,...] [--json]

Makes, in DIR, whatever is missing of:
  ca.pem, ca-key.pem         the cluster CA (its key signs node certificates;
                             keep it off the nodes)
  <id>.pem, <id>-key.pem     each node's certificate and key, for mutual TLS
                             between nodes; the common name is the node ID
  admin-token                the admin API bearer token (mode 0600)
Existing files are never overwritten: run it again with a new node ID to
add a node. Every certificate is valid for all --hosts: list the host names
and IPs in every node's --raft-addr.

Flags:
`

// adminTokenFile is the token file's name in the certificate directory.
const adminTokenFile = "admin-token"

// nodeIDPattern: node IDs name files, so they are plain.
var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

type certsNode struct {
	CA    string   `json:"ca"`
	Cert  string   `json:"cert"`
	Key   string   `json:"key"`
	Hosts []string `json:"hosts"`
}

type certsResult struct {
	Dir        string               `json:"dir"`
	Written    []string             `json:"written"`
	Existing   []string             `json:"existing"`
	Nodes      map[string]certsNode `json:"nodes"`
	AdminToken string               `json:"admin_token"`
}

func runCerts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certs", certsUsage, stderr)
	dir := fs.String("dir", "", "directory of the CA, certificates and admin token (created if missing)")
	nodesFlag := fs.String("nodes", "", "node IDs, comma-separated")
	hostsFlag := fs.String("hosts", "127.0.0.1,localhost", "host names and IPs the node certificates are valid for, comma-separated")
	asJSON := fs.Bool("json", false, "print a JSON object of the files")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("%w: --dir is required", errUsage)
	}
	ids, err := parseNodeIDs(*nodesFlag)
	if err != nil {
		return err
	}
	hosts, err := parseCertHosts(*hostsFlag)
	if err != nil {
		return err
	}
	res, err := makeCerts(*dir, ids, hosts)
	if res != nil && *asJSON {
		if perr := printJSON(stdout, res); perr != nil && err == nil {
			err = perr
		}
	} else if res != nil {
		printCerts(stdout, res, ids)
	}
	return err
}

func parseNodeIDs(list string) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	for _, id := range strings.Split(list, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		switch {
		case !nodeIDPattern.MatchString(id):
			return nil, fmt.Errorf("%w: node ID %q: use letters, digits, '.', '_' and '-' (at most 63, starting with a letter or digit)", errUsage, id)
		case id == "ca" || strings.HasSuffix(id, "-key"):
			// ca.pem is the CA; <x>-key.pem is node x's key.
			return nil, fmt.Errorf("%w: node ID %q would collide with the CA or a key file name", errUsage, id)
		case seen[id]:
			return nil, fmt.Errorf("%w: node ID %q given twice", errUsage, id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: --nodes is required: the node IDs, comma-separated", errUsage)
	}
	return ids, nil
}

func parseCertHosts(list string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(list, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if net.ParseIP(h) == nil && (strings.ContainsAny(h, ":/ ") || strings.Trim(h, ".") == "") {
			return nil, fmt.Errorf("%w: --hosts %q: want a host name or an IP address, without a port", errUsage, h)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: --hosts needs at least one host name or IP", errUsage)
	}
	return hosts, nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// makeCerts creates what is missing in dir. It returns what it did so far
// even on error, so the operator sees which files exist.
func makeCerts(dir string, ids, hosts []string) (*certsResult, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	res := &certsResult{Dir: dir, Written: []string{}, Existing: []string{}, Nodes: map[string]certsNode{}}
	note := func(written bool, paths ...string) {
		if written {
			res.Written = append(res.Written, paths...)
		} else {
			res.Existing = append(res.Existing, paths...)
		}
	}
	caCert, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	haveCert, err := exists(caCert)
	if err != nil {
		return res, err
	}
	haveKey, err := exists(caKey)
	if err != nil {
		return res, err
	}
	switch {
	case !haveCert && !haveKey:
		if err := cluster.MakeCA(dir); err != nil {
			return res, fmt.Errorf("make CA: %w", err)
		}
		note(true, caCert, caKey)
		haveKey = true
	case !haveCert:
		return res, fmt.Errorf("%s exists without %s: restore ca.pem, or remove ca-key.pem to start a new CA (then every node needs a new certificate)", caKey, caCert)
	default:
		note(false, caCert)
		if haveKey {
			note(false, caKey)
		}
	}
	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(caCert)
	if err != nil {
		return res, err
	}
	if !roots.AppendCertsFromPEM(caPEM) {
		return res, fmt.Errorf("%s holds no certificate", caCert)
	}

	for _, id := range ids {
		f := cluster.Files(dir, id)
		hc, err := exists(f.Cert)
		if err != nil {
			return res, err
		}
		hk, err := exists(f.Key)
		if err != nil {
			return res, err
		}
		switch {
		case hc && hk:
			note(false, f.Cert, f.Key)
		case hc || hk:
			return res, fmt.Errorf("node %s: only one of %s and %s exists: remove it to make a new pair", id, f.Cert, f.Key)
		default:
			if !haveKey {
				return res, fmt.Errorf("node %s: %s is missing; a new node certificate must be signed by the CA's key", id, caKey)
			}
			if err := cluster.MakeNodeCert(dir, id, hosts); err != nil {
				return res, fmt.Errorf("node %s: %w", id, err)
			}
			note(true, f.Cert, f.Key)
		}
		names, err := checkNodeCert(f, id, roots)
		if err != nil {
			return res, fmt.Errorf("node %s: %w", id, err)
		}
		res.Nodes[id] = certsNode{CA: f.CA, Cert: f.Cert, Key: f.Key, Hosts: names}
	}

	res.AdminToken = filepath.Join(dir, adminTokenFile)
	written, err := makeAdminToken(res.AdminToken)
	if err != nil {
		return res, err
	}
	note(written, res.AdminToken)
	return res, nil
}

// checkNodeCert checks that a node's files load as a node's TLS
// configuration, that the certificate is the node's and that it is signed
// by the CA (an old certificate left beside a new CA is not), and returns
// the names it is valid for.
func checkNodeCert(f cluster.CertFiles, id string, roots *x509.CertPool) ([]string, error) {
	if _, err := cluster.LoadTLS(f, nil); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s is not PEM", f.Cert)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Cert, err)
	}
	if cert.Subject.CommonName != id {
		return nil, fmt.Errorf("%s is the certificate of %q", f.Cert, cert.Subject.CommonName)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("%s does not verify against %s (made by another CA?): remove %s and %s to reissue: %w",
			f.Cert, f.CA, f.Cert, f.Key, err)
	}
	names := append([]string{}, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	return names, nil
}

// makeAdminToken writes a new random token to path unless it exists.
func makeAdminToken(path string) (written bool, err error) {
	if st, err := os.Stat(path); err == nil {
		if st.Size() == 0 {
			return false, fmt.Errorf("%s is empty: remove it to make a new token", path)
		}
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	var r [32]byte
	if _, err := rand.Read(r[:]); err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, err
	}
	if _, err := f.WriteString(hex.EncodeToString(r[:]) + "\n"); err != nil {
		f.Close()
		os.Remove(path)
		return false, err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return false, err
	}
	return true, nil
}

func printCerts(w io.Writer, res *certsResult, ids []string) {
	written := map[string]bool{}
	for _, p := range res.Written {
		written[p] = true
	}
	describe := map[string]string{
		filepath.Join(res.Dir, "ca.pem"):     "cluster CA certificate (every node)",
		filepath.Join(res.Dir, "ca-key.pem"): "CA private key (keep it off the nodes; only eddy-ctl certs uses it)",
		res.AdminToken:                       "admin API token (every node, and eddy-ctl)",
	}
	for id, n := range res.Nodes {
		describe[n.Cert] = fmt.Sprintf("%s certificate, valid for %s", id, strings.Join(n.Hosts, ", "))
		describe[n.Key] = id + " private key"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range append(append([]string{}, res.Written...), res.Existing...) {
		what := "wrote"
		if !written[p] {
			what = "kept"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", what, p, describe[p])
	}
	tw.Flush()
	if len(res.Nodes) == 0 || res.AdminToken == "" {
		return
	}
	fmt.Fprintf(w, "\nInstall on each node (its --certs-dir), keys and the token readable by the node's user alone (0600 owned by it, or 0640 root:eddy as in docs/deploy.md):\n")
	for _, id := range ids {
		if n, ok := res.Nodes[id]; ok {
			fmt.Fprintf(w, "  %s: %s %s %s %s\n", id, filepath.Base(n.CA), filepath.Base(n.Cert), filepath.Base(n.Key), filepath.Base(res.AdminToken))
		}
	}
}
