package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// fakeRoot writes files (path relative to the root: contents) under a
// temporary directory and returns it.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const meminfo2G = "MemTotal:        2000000 kB\nMemFree:          500000 kB\n"

func TestResolveMemoryLimit(t *testing.T) {
	noEnv := envMap(nil)
	for _, c := range []struct {
		name   string
		value  string
		env    map[string]string
		files  map[string]string
		set    bool
		bytes  int64
		whyHas string
	}{
		{name: "machine", value: "auto", files: map[string]string{"proc/meminfo": meminfo2G},
			set: true, bytes: 2000000 * 1024 / 4 * 3, whyHas: "MemTotal"},
		{name: "systemd unit's MemoryMax", value: "auto", files: map[string]string{
			"proc/meminfo":     "MemTotal: 4000000 kB\n",
			"proc/self/cgroup": "0::/system.slice/eddy-node.service\n",
			"sys/fs/cgroup/system.slice/eddy-node.service/memory.max": "1073741824\n",
			"sys/fs/cgroup/system.slice/memory.max":                   "max\n",
		}, set: true, bytes: 1 << 30 / 4 * 3, whyHas: "/system.slice/eddy-node.service/memory.max"},
		{name: "a parent cgroup's limit", value: "auto", files: map[string]string{
			"proc/meminfo":     "MemTotal: 4000000 kB\n",
			"proc/self/cgroup": "0::/system.slice/eddy-node.service\n",
			"sys/fs/cgroup/system.slice/eddy-node.service/memory.max": "max\n",
			"sys/fs/cgroup/system.slice/memory.max":                   "536870912\n",
		}, set: true, bytes: 512 << 20 / 4 * 3, whyHas: "/system.slice/memory.max"},
		{name: "cgroup v1 without a limit", value: "auto", files: map[string]string{
			"proc/self/cgroup": "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":            "9223372036854775807\n",
		}, set: false, whyHas: "not found"},
		{name: "cgroup v1 with a limit", value: "auto", files: map[string]string{
			"proc/meminfo":     meminfo2G,
			"proc/self/cgroup": "4:memory:/docker/abc\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "1000000000\n",
		}, set: true, bytes: 1000000000 / 4 * 3, whyHas: "/docker/abc/memory.limit_in_bytes"},
		{name: "cgroup v1, memory among several controllers, the limit at the mount's root", value: "auto", files: map[string]string{
			"proc/self/cgroup":                           "5:cpu,memory:/docker/abc\n9:cpuset:/x\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "800000000\n",
		}, set: true, bytes: 800000000 / 4 * 3, whyHas: "cgroup /memory.limit_in_bytes"},
		{name: "cgroup v2 in a container: the top memory.max", value: "auto", files: map[string]string{
			"proc/meminfo":             meminfo2G,
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "600000000\n",
		}, set: true, bytes: 600000000 / 4 * 3, whyHas: "cgroup /memory.max"},
		{name: "MemoryHigh below MemoryMax", value: "auto", files: map[string]string{
			"proc/self/cgroup": "0::/system.slice/eddy-node.service\n",
			"sys/fs/cgroup/system.slice/eddy-node.service/memory.max":  "2000000000\n",
			"sys/fs/cgroup/system.slice/eddy-node.service/memory.high": "1200000000\n",
		}, set: true, bytes: 1200000000 / 4 * 3, whyHas: "memory.high"},
		{name: "a path outside the namespace is not followed", value: "auto", files: map[string]string{
			"proc/meminfo":                     meminfo2G,
			"proc/self/cgroup":                 "0::/../sibling\n",
			"sys/fs/cgroup/sibling/memory.max": "100000000\n",
		}, set: true, bytes: 2000000 * 1024 / 4 * 3, whyHas: "MemTotal"},
		{name: "a tiny cgroup: at least 64 MiB", value: "auto", files: map[string]string{
			"proc/self/cgroup":               "0::/small\n",
			"sys/fs/cgroup/small/memory.max": "50000000\n",
		}, set: true, bytes: 64 << 20, whyHas: "/small/memory.max"},
		{name: "GOMEMLIMIT wins over auto", value: "auto", env: map[string]string{"GOMEMLIMIT": "900MiB"},
			files: map[string]string{"proc/meminfo": meminfo2G}, set: false, whyHas: "GOMEMLIMIT=900MiB"},
		{name: "nothing to read", value: "auto", files: map[string]string{"proc/meminfo": "garbage\n"}, set: false, whyHas: "not found"},
		{name: "off", value: "off", env: map[string]string{"GOMEMLIMIT": "900MiB"}, set: true, bytes: math.MaxInt64, whyHas: "off"},
		{name: "bytes", value: "1610612736", files: map[string]string{"proc/meminfo": meminfo2G}, set: true, bytes: 1610612736, whyHas: "set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			getenv := noEnv
			if c.env != nil {
				getenv = envMap(c.env)
			}
			if err := checkMemoryLimit(c.value); err != nil {
				t.Fatal(err)
			}
			got := resolveMemoryLimit(c.value, getenv, fakeRoot(t, c.files))
			if got.set != c.set || (c.set && got.bytes != c.bytes) || !strings.Contains(got.why, c.whyHas) {
				t.Fatalf("got %+v, want set %v, %d bytes, why with %q", got, c.set, c.bytes, c.whyHas)
			}
		})
	}
}

func TestCheckMemoryLimit(t *testing.T) {
	for _, v := range []string{"", "1000", "2GiB", "-1", "1099511627777", "max", "Auto"} {
		if err := checkMemoryLimit(v); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
			t.Errorf("%q: %v, want an error naming --memory-limit", v, err)
		}
	}
	for _, v := range []string{"auto", "off", "67108864", "1099511627776"} {
		if err := checkMemoryLimit(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	c, err := parseConfig([]string{"--memory-limit", "12"}, envMap(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.id, c.dataDir, c.certsDir, c.tokenFile = "n1", t.TempDir(), t.TempDir(), "tok"
	if err := c.validate(envMap(nil)); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
		t.Fatalf("validate: %v", err)
	}
}

// A node applies --memory-limit before it starts serving, and says so in
// its log: here it then fails for want of certificates.
func TestNodeAppliesMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	dir := t.TempDir()
	t.Setenv("EDDY_ADMIN_TOKEN", "0123456789abcdef0123")
	t.Setenv("EDDY_CONFIG", "")
	t.Setenv("EDDY_MEMORY_LIMIT", "536870912")
	var stdout, stderr bytes.Buffer
	code := run([]string{"--id", "n1", "--data-dir", filepath.Join(dir, "data"), "--certs-dir", filepath.Join(dir, "no-certs"),
		"--raft-addr", "127.0.0.1:1", "--admin-addr", "127.0.0.1:1", "--http-addr", "127.0.0.1:1"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (no certificates)\n%s", code, stderr.String())
	}
	if got := debug.SetMemoryLimit(-1); got != 536870912 {
		t.Fatalf("the runtime's memory limit is %d, want 536870912", got)
	}
	log := stderr.String()
	if !strings.Contains(log, "memory limit: bytes=536870912 why=set") || !strings.Contains(log, `memory-limit="536870912 (env)"`) {
		t.Fatalf("the memory limit is not in the log:\n%s", log)
	}
}
