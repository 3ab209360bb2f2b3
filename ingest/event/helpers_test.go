package event

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// td is the path of a file under the project's testdata/ directory.
func td(p string) string { return filepath.Join("..", "..", "testdata", filepath.FromSlash(p)) }

func readTD(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(td(p))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lines returns the non-empty lines of a testdata file.
func lines(t testing.TB, p string) [][]byte {
	t.Helper()
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(readTD(t, p)))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type manifest struct {
	Frames     int      `json:"frames"`
	CommitFr   int      `json:"commit_frames"`
	V1Events   int      `json:"v1_events"`
	Creates    int      `json:"creates"`
	Updates    int      `json:"updates"`
	Deletes    int      `json:"deletes"`
	Identity   int      `json:"identity"`
	Account    int      `json:"account"`
	SeqFirst   int64    `json:"seq_first"`
	SeqLast    int64    `json:"seq_last"`
	CommitDIDs []string `json:"commit_dids"`
}

func loadManifest(t testing.TB) manifest {
	var m manifest
	if err := json.Unmarshal(readTD(t, "jetstream/corpus/manifest.json"), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// frames returns the raw frames of frames.bin.
func corpusFrames(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	err := ReadFrames(bytes.NewReader(readTD(t, "jetstream/corpus/frames.bin")), func(f []byte) error {
		out = append(out, append([]byte(nil), f...))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// carSummary is one row of derived/car_summary.tsv.
type carSummary struct {
	file         string
	did, rev     string
	version      int
	entries      int
	present      int
	missingNodes int
	blocks       int
	root, data   string
	bytes        int
}

func loadCARSummary(t testing.TB) []carSummary {
	t.Helper()
	var out []carSummary
	for _, l := range lines(t, "derived/car_summary.tsv") {
		if l[0] == '#' {
			continue
		}
		f := strings.Split(string(l), "\t")
		if len(f) != 11 {
			t.Fatalf("car_summary: %d fields in %q", len(f), l)
		}
		kv := map[string]string{}
		for _, x := range f[2:] {
			k, v, ok := strings.Cut(x, "=")
			if !ok {
				t.Fatalf("car_summary: bad field %q", x)
			}
			kv[k] = v
		}
		atoi := func(s string) int {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		s := carSummary{
			file:         f[0],
			bytes:        atoi(f[1]),
			did:          kv["did"],
			rev:          kv["rev"],
			version:      atoi(kv["commit_version"]),
			entries:      atoi(kv["mst_entries"]),
			present:      atoi(kv["records_present"]),
			missingNodes: atoi(kv["missing_mst_nodes"]),
			blocks:       atoi(kv["blocks"]),
			root:         kv["root"],
			data:         kv["data"],
		}
		if s.rev == "None" {
			s.rev = ""
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		t.Fatal("empty car_summary.tsv")
	}
	return out
}
