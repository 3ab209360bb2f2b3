package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// The Go runtime's soft memory limit (--memory-limit). Without one, the
// collector lets the heap grow to twice what was live after the last
// collection (GOGC=100), so a node's peak is often that slack rather than
// what it holds. With a limit the collector runs more often as the
// runtime's memory nears it, so it stays under it as long as what is live
// does (it does not count mapped files: the table metadata's page cache
// comes on top). Measured on the 100M backfill bench (docs/scale.md, "A
// soft memory limit"): 1 GiB took the peak RSS from 1.96 to 1.24 GB (in
// the count of the mega target; the write phase's from 1.32 to 1.10) for
// the same write CPU.

// memoryLimitShare is the share of the memory a node may use (its
// cgroup's limit, else the machine's) that --memory-limit=auto gives the
// Go heap: the rest is for what the limit does not count (the page cache
// of mapped table metadata, the kernel's buffers) and for headroom.
const (
	memoryLimitShareNum = 3
	memoryLimitShareDen = 4
)

// memoryLimitMin and memoryLimitMax bound an explicit --memory-limit.
const (
	memoryLimitMin = 64 << 20
	memoryLimitMax = 1 << 40
)

// memoryLimit is a resolved --memory-limit: the limit to set (none when
// set is false: the runtime keeps what it has, GOMEMLIMIT's or none) and
// where it came from, for the log.
type memoryLimit struct {
	bytes int64
	set   bool
	why   string
}

// checkMemoryLimit validates a --memory-limit value: auto, off, or a byte
// count in memoryLimitMin..memoryLimitMax.
func checkMemoryLimit(v string) error {
	switch v {
	case "auto", "off":
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < memoryLimitMin || n > memoryLimitMax {
		return fmt.Errorf("--memory-limit %q: want auto, off, or bytes in %d..%d (64 MiB..1 TiB)", v, int64(memoryLimitMin), int64(memoryLimitMax))
	}
	return nil
}

// resolveMemoryLimit turns a --memory-limit value (checked) into the limit
// to set. auto defers to GOMEMLIMIT when the environment sets it (the
// runtime has applied it already), else takes memoryLimitShare of the
// memory the node may use, as readSystemMemory finds it under root ("/"
// on a node; a directory of fake files in tests), and at least
// memoryLimitMin. A byte count or off overrides GOMEMLIMIT.
func resolveMemoryLimit(v string, getenv func(string) (string, bool), root string) memoryLimit {
	switch v {
	case "off":
		return memoryLimit{bytes: math.MaxInt64, set: true, why: "off"}
	case "auto":
		if g, ok := getenv("GOMEMLIMIT"); ok && g != "" {
			return memoryLimit{why: "GOMEMLIMIT=" + g}
		}
		total, from := readSystemMemory(root)
		if total <= 0 {
			return memoryLimit{why: "auto: the memory available was not found; no limit"}
		}
		return memoryLimit{
			bytes: max(total/memoryLimitShareDen*memoryLimitShareNum, memoryLimitMin),
			set:   true,
			why:   fmt.Sprintf("auto: %d/%d of %d bytes (%s), at least %d", memoryLimitShareNum, memoryLimitShareDen, total, from, int64(memoryLimitMin)),
		}
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return memoryLimit{bytes: n, set: true, why: "set"}
}

// applyMemoryLimit sets the limit (when there is one to set) and returns
// the runtime's limit after it.
func applyMemoryLimit(l memoryLimit) int64 {
	if l.set {
		debug.SetMemoryLimit(l.bytes)
	}
	return debug.SetMemoryLimit(-1)
}

// readSystemMemory returns the memory this process may use: the smallest
// of the machine's (MemTotal in /proc/meminfo) and the memory.max or
// memory.high (cgroup v2) or memory.limit_in_bytes (cgroup v1) of its
// cgroup and every cgroup above it (a systemd unit's MemoryMax= or
// MemoryHigh=, a container's limit), and which one it was; 0 when none is
// readable. Paths are under root, the cgroup file systems where they are
// usually mounted (/sys/fs/cgroup, /sys/fs/cgroup/memory): a node where
// they are elsewhere gets the machine's memory, as the log says.
func readSystemMemory(root string) (int64, string) {
	var best int64
	var from string
	take := func(n int64, what string) {
		if n > 0 && (best == 0 || n < best) {
			best, from = n, what
		}
	}
	if n := readMemTotal(filepath.Join(root, "proc/meminfo")); n > 0 {
		take(n, "MemTotal")
	}
	for _, c := range readCgroups(filepath.Join(root, "proc/self/cgroup")) {
		// A limit of the cgroup or of any above it binds the process.
		base, files := "sys/fs/cgroup/memory", []string{"memory.limit_in_bytes"}
		if c.v2 {
			base, files = "sys/fs/cgroup", []string{"memory.max", "memory.high"}
		}
		for dir := c.path; ; dir = filepath.Dir(dir) {
			for _, file := range files {
				if n := readLimitFile(filepath.Join(root, base, dir, file)); n > 0 {
					take(n, "cgroup "+filepath.Join(dir, file))
				}
			}
			if dir == "/" {
				break
			}
		}
	}
	return best, from
}

// readMemTotal returns /proc/meminfo's MemTotal in bytes, 0 if absent.
func readMemTotal(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil || kb <= 0 || kb > math.MaxInt64/1024 {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

type cgroupLine struct {
	v2   bool
	path string
}

// readCgroups returns the memory cgroups of /proc/self/cgroup: the
// unified one ("0::/path", v2) and a v1 hierarchy with the memory
// controller.
func readCgroups(path string) []cgroupLine {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []cgroupLine
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		// A path with ".." is a cgroup outside this namespace's view
		// (cleaning it would name another one): skip it.
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") || strings.Contains(parts[2], "..") {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			out = append(out, cgroupLine{v2: true, path: filepath.Clean(parts[2])})
		case hasController(parts[1], "memory"):
			out = append(out, cgroupLine{path: filepath.Clean(parts[2])})
		}
	}
	return out
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimitFile reads a cgroup memory limit: bytes, or 0 for "max", a
// value of 2^60 or more (cgroup v1's "no limit") or a missing file.
func readLimitFile(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0
	}
	return n
}
