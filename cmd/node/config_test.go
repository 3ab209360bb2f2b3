package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "eddy-node.conf")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A flag wins over the environment, which wins over the file, which wins
// over the default; each value's origin is recorded.
func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, `# a node
id = n-file
data-dir = /var/lib/eddy
flush-interval = 3s
memtable-bytes = 2097152   # 2 MiB
log-level = "debug"   # a comment after a quoted value
http-addr = 127.0.0.1:9001
source = replay+file:///a.jsonl
source = replay+file:///b.jsonl
bootstrap = true
`)
	env := map[string]string{
		"EDDY_CONFIG":         file,
		"EDDY_ID":             "n-env",
		"EDDY_FLUSH_INTERVAL": "4s",
		"EDDY_READY_LAG_MAX":  "7s",
	}
	c, err := parseConfig([]string{"--id", "n-flag", "--cache-bytes", "2097152"}, envMap(env), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, got, want, origin string
	}{
		{"id", c.id, "n-flag", "flag"},
		{"cache-bytes", itoa(c.cacheBytes), "2097152", "flag"},
		{"flush-interval", c.flushInterval.String(), "4s", "env"},
		{"ready-lag-max", c.readyLagMax.String(), "7s", "env"},
		{"data-dir", c.dataDir, "/var/lib/eddy", "file"},
		{"memtable-bytes", itoa(int64(c.memtableBytes)), "2097152", "file"},
		{"log-level", c.logLevel, "debug", "file"},
		{"http-addr", c.httpAddr, "127.0.0.1:9001", "file"},
		{"source", strings.Join(c.sources, " "), "replay+file:///a.jsonl replay+file:///b.jsonl", "file"},
		{"bootstrap", boolStr(c.bootstrap), "true", "file"},
		{"raft-addr", c.raftAddr, "127.0.0.1:7000", "default"},
		{"config", c.configFile, file, "env"},
	} {
		if tc.got != tc.want || c.origin[tc.name] != tc.origin {
			t.Errorf("%s = %q from %s, want %q from %s", tc.name, tc.got, c.origin[tc.name], tc.want, tc.origin)
		}
	}
	// --config on the command line beats EDDY_CONFIG; the environment's
	// sources replace the file's, split on spaces.
	other := writeFile(t, "data-dir = /srv/eddy\n")
	env["EDDY_SOURCE"] = "replay+file:///c.jsonl  jetstream+wss://a.example/subscribe,wss://b.example/subscribe"
	c, err = parseConfig([]string{"--config", other}, envMap(env), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.dataDir != "/srv/eddy" || c.id != "n-env" || len(c.sources) != 2 || c.sources[1] != "jetstream+wss://a.example/subscribe,wss://b.example/subscribe" {
		t.Fatalf("got data-dir %q id %q sources %q", c.dataDir, c.id, c.sources)
	}
	// Flags replace, not extend, a lower layer's list.
	c, err = parseConfig([]string{"--source", "replay+file:///d.jsonl"}, envMap(env), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.sources) != 1 || c.sources[0] != "replay+file:///d.jsonl" {
		t.Fatalf("sources %q", c.sources)
	}
}

func itoa(n int64) string   { return strconv.FormatInt(n, 10) }
func boolStr(b bool) string { return strconv.FormatBool(b) }

func validBase() map[string]string {
	return map[string]string{"EDDY_ID": "n1", "EDDY_DATA_DIR": "/d", "EDDY_CERTS_DIR": "/c", "EDDY_ADMIN_TOKEN": "0123456789abcdef0123"}
}

// Invalid configuration fails at start with a message naming the option,
// and where the bad value came from.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string
		want string
	}{
		{"missing id", nil, map[string]string{"EDDY_DATA_DIR": "/d", "EDDY_CERTS_DIR": "/c", "EDDY_ADMIN_TOKEN": "x"}, "", "--id is required"},
		{"bad id", []string{"--id", "../n1"}, validBase(), "", "--id"},
		{"missing data dir", []string{"--data-dir", ""}, map[string]string{"EDDY_ID": "n1", "EDDY_CERTS_DIR": "/c", "EDDY_ADMIN_TOKEN": "x"}, "", "--data-dir is required"},
		{"missing certs", nil, map[string]string{"EDDY_ID": "n1", "EDDY_DATA_DIR": "/d", "EDDY_ADMIN_TOKEN": "x"}, "", "--certs-dir is required"},
		{"missing token", nil, map[string]string{"EDDY_ID": "n1", "EDDY_DATA_DIR": "/d", "EDDY_CERTS_DIR": "/c"}, "", "--admin-token-file (or EDDY_ADMIN_TOKEN) is required"},
		{"bad duration flag", []string{"--flush-interval", "fast"}, validBase(), "", "flush-interval"},
		{"bad duration env", nil, merge(validBase(), "EDDY_FLUSH_INTERVAL", "2 seconds"), "", `EDDY_FLUSH_INTERVAL="2 seconds": invalid value for --flush-interval`},
		{"bad duration file", nil, validBase(), "ready-lag-max = soon\n", "line 1: invalid value \"soon\" for ready-lag-max"},
		{"duration out of range", []string{"--ready-lag-max", "10ms"}, validBase(), "", "--ready-lag-max 10ms: out of range"},
		{"bad address", []string{"--http-addr", "localhost"}, validBase(), "", `--http-addr "localhost"`},
		{"bad port", []string{"--raft-addr", "127.0.0.1:99999"}, validBase(), "", `--raft-addr "127.0.0.1:99999": port`},
		{"bad advertise", []string{"--raft-advertise", ":7000"}, validBase(), "", "--raft-advertise"},
		{"advertise every interface", []string{"--http-advertise", "0.0.0.0:8080"}, validBase(), "", "--http-advertise"},
		{"advertise every interface v6", []string{"--admin-advertise", "[::]:7001"}, validBase(), "", "--admin-advertise"},
		{"bad join", []string{"--join", "10.0.0.1:7001,nohost"}, validBase(), "", `--join "nohost"`},
		{"bad int env", nil, merge(validBase(), "EDDY_MEMTABLE_BYTES", "lots"), "", "--memtable-bytes"},
		{"memtable out of range", []string{"--memtable-bytes", "10"}, validBase(), "", "--memtable-bytes 10: out of range"},
		{"cache out of range", []string{"--cache-bytes", "-1"}, validBase(), "", "--cache-bytes -1: out of range"},
		{"bad log level", []string{"--log-level", "loud"}, validBase(), "", "--log-level"},
		{"client rate out of range", []string{"--client-rate", "-1"}, validBase(), "", "--client-rate -1: out of range"},
		{"client burst out of range", []string{"--client-burst", "0"}, validBase(), "", "--client-burst 0: out of range"},
		{"client in flight out of range", []string{"--client-in-flight", "65"}, validBase(), "", "--client-in-flight 65: out of range 0..64"},
		{"client conns out of range", []string{"--client-conns", "-1"}, validBase(), "", "--client-conns -1: out of range 0..100000"},
		{"client pace gap out of range", []string{"--client-pace-gap", "1s"}, validBase(), "", "--client-pace-gap 1s: out of range 0..10ms"},
		{"bad trusted proxy", nil, merge(validBase(), "EDDY_TRUSTED_PROXIES", "10.0.0.0/8,proxy.example"), "", `--trusted-proxies: trusted proxy "proxy.example"`},
		{"bad bool env", nil, merge(validBase(), "EDDY_BOOTSTRAP", "maybe"), "", "--bootstrap"},
		{"bad plc", []string{"--plc", "plc.directory"}, validBase(), "", "--plc"},
		{"bad source", []string{"--source", "gopher://x"}, validBase(), "", "--source"},
		{"bad store scheme", []string{"--store", "ftp://bucket/x"}, validBase(), "", `--store ftp://bucket/x: unsupported scheme "ftp"`},
		{"unknown flag", []string{"--flush-intervall", "2s"}, validBase(), "", "flush-intervall"},
		{"stray argument", []string{"n1"}, validBase(), "", `unexpected argument "n1"`},
		{"unknown key", nil, validBase(), "id = n1\nflush_interval = 2s\n", `line 2: unknown option "flush_interval"`},
		{"no equals", nil, validBase(), "bootstrap\n", "line 1: want name = value"},
		{"twice", nil, validBase(), "plc = off\nplc = off\n", "line 2: plc is set twice"},
		{"secret in file", nil, validBase(), "admin-token = 0123456789abcdef\n", `"admin-token" is a secret`},
		{"s3 secret in file", nil, validBase(), "s3-secret-key = abc\n", "EDDY_S3_SECRET_KEY"},
		{"version in file", nil, validBase(), "version = true\n", `unknown option "version"`},
		{"missing file", []string{"--config", "/nonexistent/eddy.conf"}, validBase(), "", "--config: open /nonexistent/eddy.conf"},
		{"text after a quoted value", nil, validBase(), "log-level = \"debug\" info\n", `line 1: log-level: bad quoted value: "info" after the closing quote`},
		{"unclosed quote", nil, validBase(), "log-level = \"debug\n", "line 1: log-level: bad quoted value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env
			if tc.file != "" {
				env = merge(env, "EDDY_CONFIG", writeFile(t, tc.file))
			}
			c, err := parseConfig(tc.args, envMap(env), nil)
			if err == nil {
				err = c.validate(envMap(env))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// The base itself is valid.
	c, err := parseConfig(nil, envMap(validBase()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.validate(envMap(validBase())); err != nil {
		t.Fatal(err)
	}
	// A relative data directory is made absolute, so that the default
	// store is a file URL.
	rel := merge(validBase(), "EDDY_DATA_DIR", "lc/n5")
	c, err = parseConfig(nil, envMap(rel), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.validate(envMap(rel)); err != nil || !filepath.IsAbs(c.dataDir) || !strings.HasSuffix(c.dataDir, "/lc/n5") {
		t.Fatalf("data dir %q, %v", c.dataDir, err)
	}
}

func merge(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// --help names every option with its environment variable and default,
// and the secrets' variables.
func TestConfigHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := parseConfig([]string{"--help"}, envMap(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	var c config
	fs := newFlagSet(&c)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(help, "  --"+f.Name+" ") {
			t.Errorf("--help lacks --%s", f.Name)
		}
		if !notFromEnvOrFile[f.Name] && !strings.Contains(help, "[$"+envName(f.Name)+"]") {
			t.Errorf("--help lacks $%s", envName(f.Name))
		}
		if f.DefValue != "" && f.DefValue != "false" && !strings.Contains(help, f.DefValue) {
			t.Errorf("--help lacks the default of --%s (%s)", f.Name, f.DefValue)
		}
	})
	if n < 20 {
		t.Fatalf("only %d options", n)
	}
	for _, s := range []string{"[$EDDY_CONFIG]", "EDDY_ADMIN_TOKEN ", "EDDY_S3_ACCESS_KEY", "EDDY_S3_SECRET_KEY", "(default: 30s)", "(default: 2s)"} {
		if !strings.Contains(help, s) {
			t.Errorf("--help lacks %q", s)
		}
	}
	// The binary's own --help exits 0 and prints the same.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 || stdout.String() != help {
		t.Fatalf("run --help: exit %d, %d bytes", code, stdout.Len())
	}
}

// Secrets are never logged: a node that starts, logs its configuration and
// then fails (no certificates) shows neither the admin token nor the store
// URL's query or user information.
func TestSecretsNotLogged(t *testing.T) {
	const token = "SEKRET-token-0123456789abcdef"
	prev := debug.SetMemoryLimit(-1) // run sets the process's (--memory-limit auto)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	dir := t.TempDir()
	t.Setenv("EDDY_ADMIN_TOKEN", token)
	t.Setenv("EDDY_CONFIG", "")
	store := "file://" + filepath.Join(dir, "store")
	var stdout, stderr bytes.Buffer
	code := run([]string{"--id", "n1", "--data-dir", filepath.Join(dir, "data"), "--certs-dir", filepath.Join(dir, "no-certs"),
		"--store", store, "--raft-addr", "127.0.0.1:1", "--admin-addr", "127.0.0.1:1", "--http-addr", "127.0.0.1:1"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (no certificates)\n%s", code, stderr.String())
	}
	log := stderr.String()
	if !strings.Contains(log, "configuration") || !strings.Contains(log, `store="`+store+` (flag)"`) || !strings.Contains(log, "flush-interval=\"2s (default)\"") {
		t.Fatalf("the configuration line is missing or incomplete:\n%s", log)
	}
	if strings.Contains(log, token) {
		t.Fatalf("the admin token was logged:\n%s", log)
	}

	// Two sources of one name (two relay firehoses) would share a cursor:
	// refused as configuration.
	stderr.Reset()
	if code := run([]string{"--id", "n1", "--data-dir", dir, "--certs-dir", dir, "--source", "firehose+wss://a.example", "--source", "firehose+wss://b.example"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `two sources named \"firehose\"`) {
		t.Fatalf("two firehoses: exit %d:\n%s", code, stderr.String())
	}

	// An admin token file that is empty or cannot be read is a
	// configuration error, exit 2 (before, 1, as a failure at run time).
	empty := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{empty, filepath.Join(dir, "no-such-token")} {
		stderr.Reset()
		code := run([]string{"--id", "n1", "--data-dir", dir, "--certs-dir", dir, "--admin-token-file", f}, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "invalid configuration") || !strings.Contains(stderr.String(), f) {
			t.Fatalf("--admin-token-file %s: exit %d:\n%s", f, code, stderr.String())
		}
	}

	// A store URL with credentials or a query is refused or redacted, never echoed.
	for _, s := range []string{"s3://AKIA:SEKRETKEY@bucket/p", "s3x://bucket/p?secret_key=SEKRETKEY", "ftp://u:SEKRETKEY@h/p?x=SEKRETKEY"} {
		stderr.Reset()
		code := run([]string{"--id", "n1", "--data-dir", dir, "--certs-dir", dir, "--store", s}, &stdout, &stderr)
		if code != 2 || strings.Contains(stderr.String(), "SEKRETKEY") || !strings.Contains(stderr.String(), "--store") {
			t.Fatalf("--store %s: exit %d:\n%s", s, code, stderr.String())
		}
	}
	for in, want := range map[string]string{
		"s3://bucket/p?endpoint=h:9000&secret_key_file=/k": "s3://bucket/p",
		"s3://AKIA:SEKRET@bucket/p":                        "s3://REDACTED@bucket/p",
		"file:///var/lib/eddy/store":                       "file:///var/lib/eddy/store",
		"/plain/path":                                      "/plain/path",
	} {
		if got := redactStore(in); got != want {
			t.Errorf("redactStore(%q) = %q, want %q", in, got, want)
		}
	}
}

// The example config file in deploy/ is valid as shipped.
func TestExampleConfigFile(t *testing.T) {
	p := "../../deploy/eddy-node.conf.example"
	env := map[string]string{"EDDY_CONFIG": p, "EDDY_ADMIN_TOKEN": "0123456789abcdef0123"}
	c, err := parseConfig(nil, envMap(env), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.validate(envMap(env)); err != nil {
		t.Fatal(err)
	}
	if c.id == "" || c.origin["id"] != "file" || c.readyLagMax != 30*time.Second {
		t.Fatalf("example: id %q from %s, ready-lag-max %v", c.id, c.origin["id"], c.readyLagMax)
	}
}

// The example environment file in deploy/systemd is valid as shipped, read
// as systemd reads an EnvironmentFile (KEY=VALUE lines, # comments), and
// its sources are the live stream and the resync-only backfill it names.
func TestExampleEnvFile(t *testing.T) {
	b, err := os.ReadFile("../../deploy/systemd/eddy-node.env.example")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"EDDY_ADMIN_TOKEN": "0123456789abcdef0123"}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q", line)
		}
		env[k] = v
	}
	delete(env, "EDDY_ADMIN_TOKEN_FILE") // the example's path does not exist here
	c, err := parseConfig(nil, envMap(env), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.validate(envMap(env)); err != nil {
		t.Fatal(err)
	}
	if len(c.sources) != 2 || !strings.HasPrefix(c.sources[0], "jetstream+") || !strings.HasSuffix(c.sources[1], "&resync_only=true") {
		t.Fatalf("sources %q", c.sources)
	}
}

// The node reads the admin token as eddy-ctl does: a named file first,
// $EDDY_ADMIN_TOKEN only without one; an empty file is refused.
func TestAdminTokenPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(file, []byte("from-the-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDDY_ADMIN_TOKEN", "from-the-variable-0123456789")
	if got, err := adminToken(config{tokenFile: file}); err != nil || got != "from-the-file-0123456789" {
		t.Fatalf("file and variable: %q, %v; want the file's token", got, err)
	}
	if got, err := adminToken(config{}); err != nil || got != "from-the-variable-0123456789" {
		t.Fatalf("variable alone: %q, %v; want the variable's token", got, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := adminToken(config{tokenFile: empty}); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("empty file: %q, %v; want an error naming it empty", got, err)
	}
}

// The configuration line shows every source, each URL without its query
// or user part (a parameter may name a key file or carry a token).
func TestSourcesLoggedRedacted(t *testing.T) {
	got := redactSources([]string{
		"jetstream+wss://user:pw@js1.example/subscribe?wantedCollections=app.bsky.feed.like,wss://js2.example/subscribe",
		"backfill+https://relay.example?plc=https://plc.example&memory_mb=256",
	})
	want := "jetstream+wss://REDACTED@js1.example/subscribe,wss://js2.example/subscribe backfill+https://relay.example"
	if got != want {
		t.Fatalf("redacted sources %q, want %q", got, want)
	}
	// And the configuration line carries them so.
	c := config{sources: listFlag{"backfill+https://relay.example?plc=https://plc.example"}, origin: map[string]string{"source": "flag"}}
	kv := c.logged()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "source" {
			if v := kv[i+1]; v != "backfill+https://relay.example (flag)" {
				t.Fatalf("configuration line: source=%q", v)
			}
			return
		}
	}
	t.Fatal("no source on the configuration line")
}
