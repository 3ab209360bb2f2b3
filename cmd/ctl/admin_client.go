package main

import (
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
	"strconv"
	"strings"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/internal/backoff"
	"github.com/eddy-backlinks/eddy/internal/cliflag"
)

// Shared flags and calls of the commands that talk to the admin API (join,
// remove, transfer-leadership, status).

// Environment variables holding the admin token. The token itself is
// never a flag: command lines show in ps and shell history.
const (
	envTokenFile = "EDDY_ADMIN_TOKEN_FILE"
	envToken     = cluster.EnvAdminToken
)

const (
	defaultAdminTimeout = 30 * time.Second
	lookupTimeout       = 5 * time.Second
	retryBackoffMin     = 200 * time.Millisecond
	retryBackoffMax     = 2 * time.Second
)

// lookupHost resolves a host name (a variable for tests).
var lookupHost = net.DefaultResolver.LookupHost

// adminFlags are the flags every admin command takes.
type adminFlags struct {
	addrs     string
	tokenFile string
	timeout   time.Duration
	json      bool
}

func addAdminFlags(fs *flag.FlagSet, withJSON bool) *adminFlags {
	f := &adminFlags{}
	fs.StringVar(&f.addrs, "addr", "", "admin API addresses, comma-separated, each host:port or http://host:port; tried in turn")
	fs.StringVar(&f.tokenFile, "token-file", os.Getenv(envTokenFile),
		"file holding the admin token (default $"+envTokenFile+"; without either, the token is read from $"+envToken+")")
	fs.DurationVar(&f.timeout, "timeout", defaultAdminTimeout, "give up after this long (a call is retried while the cluster has no leader)")
	if withJSON {
		fs.BoolVar(&f.json, "json", false, "print the answer as JSON")
	}
	return f
}

// parseAdminArgs parses args into fs, refusing a token given as a flag
// with an explanation rather than "flag provided but not defined".
func parseAdminArgs(fs *flag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		name := strings.TrimLeft(a, "-")
		if name, _, _ = strings.Cut(name, "="); strings.HasPrefix(a, "-") && (name == "token" || name == "admin-token") {
			return fmt.Errorf("%w: the admin token is never given on the command line (it would show in ps and shell history): use --token-file FILE, $%s or $%s",
				errUsage, envTokenFile, envToken)
		}
	}
	return parseFlags(fs, args)
}

// client builds the admin client: the token and the addresses.
// adminFlagSet returns the flag set of an admin command: usage on -h, the
// admin flags (addresses, token file, timeout, and --json).
func adminFlagSet(name, usage string, stderr io.Writer) (*flag.FlagSet, *adminFlags) {
	fs := newFlagSet(name, usage, stderr)
	return fs, addAdminFlags(fs, true)
}

// newFlagSet returns a command's flag set: errors to stderr, and on -h the
// command's usage text, then its flags.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// helpAsked says whether arg asks for help (a command with subcommands
// given -h instead of one).
func helpAsked(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "--h", "help":
		return true
	}
	return false
}

// parseFlags parses args into fs: -h gives flag.ErrHelp, a bad flag or a
// stray argument a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error { return cliflag.Parse(fs, args, errUsage) }

// connect returns the admin client and a context bounded by --timeout.
func (f *adminFlags) connect(ctx context.Context) (*cluster.AdminClient, context.Context, context.CancelFunc, error) {
	c, err := f.client(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	return c, ctx, cancel, nil
}

func (f *adminFlags) client(ctx context.Context) (*cluster.AdminClient, error) {
	token, err := readToken(f.tokenFile)
	if err != nil {
		return nil, err
	}
	addrs, err := parseAdminAddrs(ctx, f.addrs)
	if err != nil {
		return nil, err
	}
	if f.timeout <= 0 {
		return nil, fmt.Errorf("%w: --timeout must be positive", errUsage)
	}
	return &cluster.AdminClient{Addrs: addrs, Token: token}, nil
}

// readToken reads the admin token (cluster.ReadAdminToken), saying how to
// give one when none is.
func readToken(file string) (string, error) {
	tok, err := cluster.ReadAdminToken(file)
	if errors.Is(err, cluster.ErrNoAdminToken) {
		return "", fmt.Errorf("%w: no admin token: give --token-file FILE (the admin-token file `eddy-ctl certs` wrote), or set $%s or $%s",
			errUsage, envTokenFile, envToken)
	}
	return tok, err
}

// parseAdminAddrs splits a comma-separated address list into base URLs.
// One address whose host name resolves to several IPs becomes one address
// per IP, so each node behind a round-robin name is tried.
func parseAdminAddrs(ctx context.Context, list string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		u, err := parseAdminAddr(s)
		if err != nil {
			return nil, err
		}
		out = append(out, u.String())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --addr is required: the admin address (host:port) of one or more nodes", errUsage)
	}
	if len(out) > 1 {
		return out, nil
	}
	u, _ := url.Parse(out[0])
	host, port := u.Hostname(), u.Port()
	if net.ParseIP(host) != nil || u.Scheme != "http" {
		// An IP needs no lookup; an https certificate names the host, not its IPs.
		return out, nil
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	ips, err := lookupHost(lctx, host)
	if err != nil || len(ips) < 2 {
		// A lookup failure shows when the call is made.
		return out, nil
	}
	out = out[:0]
	for _, ip := range ips {
		out = append(out, (&url.URL{Scheme: u.Scheme, Host: net.JoinHostPort(ip, port)}).String())
	}
	return out, nil
}

func parseAdminAddr(s string) (*url.URL, error) {
	raw := s
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	bad := func(why string) (*url.URL, error) {
		return nil, fmt.Errorf("%w: admin address %q: %s; want host:port or http://host:port", errUsage, s, why)
	}
	if err != nil {
		return bad(err.Error())
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad("scheme must be http or https")
	}
	if u.Hostname() == "" || u.Port() == "" {
		return bad("host and port are required")
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p <= 0 || p > 65535 {
		return bad("bad port")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return bad("no path, query or user part")
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// checkHostPort checks a host:port flag value.
func checkHostPort(flagName, v string) error {
	if v == "" {
		return fmt.Errorf("%w: --%s host:port is required", errUsage, flagName)
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("%w: --%s %q: %v", errUsage, flagName, v, err)
	}
	if host == "" {
		return fmt.Errorf("%w: --%s %q: a host is required (the address other nodes reach this one at)", errUsage, flagName, v)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("%w: --%s %q: bad port", errUsage, flagName, v)
	}
	return nil
}

// callErrors returns every admin API error in err's tree (AdminClient joins
// one error per address it tried).
func callErrors(err error) []*cluster.CallError {
	var out []*cluster.CallError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if ce, ok := e.(*cluster.CallError); ok {
			out = append(out, ce)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// retryable reports whether a failed call is worth repeating: a node
// answered that no leader is known yet (503), or, for an idempotent call,
// that the leader it forwarded to did not answer (502).
func retryable(err error, idempotent bool) bool {
	for _, ce := range callErrors(err) {
		if ce.Status == http.StatusServiceUnavailable || (idempotent && ce.Status == http.StatusBadGateway) {
			return true
		}
	}
	return false
}

// adminCall makes one admin call, retrying with backoff while the cluster
// has no leader, until ctx ends. Progress notes go to stderr.
func adminCall(ctx context.Context, c *cluster.AdminClient, method, path string, body, out any, idempotent bool, stderr io.Writer, cmd string) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	retry := backoff.Policy{Min: retryBackoffMin, Max: retryBackoffMax}
	var wait time.Duration
	noted := false
	for {
		err := c.Call(ctx, method, path, b, out)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !retryable(err, idempotent) {
			return describeCallErr(ctx, err)
		}
		if !noted {
			fmt.Fprintf(stderr, "eddy-ctl %s: no leader reachable yet (%s); retrying\n", cmd, oneLine(err))
			noted = true
		}
		wait = retry.Next(wait)
		select {
		case <-ctx.Done():
			return describeCallErr(ctx, err)
		case <-time.After(wait):
		}
	}
}

// describeCallErr turns a failed call into a message for the operator.
func describeCallErr(ctx context.Context, err error) error {
	for _, ce := range callErrors(err) {
		if ce.Status == http.StatusUnauthorized {
			return &adminError{err: err, msg: fmt.Sprintf("the admin token was refused (%s): check --token-file, $%s and $%s against the cluster's admin-token file",
				ce.Message, envTokenFile, envToken)}
		}
	}
	msg := oneLine(err)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg += " (gave up after --timeout)"
	}
	return &adminError{msg: msg, err: err}
}

// adminError is a failed call's message for the operator; it wraps the
// client's error, so callErrors still finds the API's answers.
type adminError struct {
	msg string
	err error
}

func (e *adminError) Error() string { return e.msg }
func (e *adminError) Unwrap() error { return e.err }

// oneLine flattens joined errors ("a\nb") into "a; b".
func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}

// nodeStatus asks the given addresses, in turn, for one node's own status
// (GET /admin/status), for its view of leader and configuration.
func nodeStatus(ctx context.Context, c *cluster.AdminClient) (cluster.NodeStatus, error) {
	var st cluster.NodeStatus
	err := c.Call(ctx, http.MethodGet, "/admin/status", nil, &st)
	if err != nil {
		return st, describeCallErr(ctx, err)
	}
	return st, nil
}

// printJSON prints v indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
