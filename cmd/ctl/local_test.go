package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A node's data directory is emptied, not removed, before a retry on new
// ports: it may be a mount point.
func TestEmptyDirKeepsTheDirectory(t *testing.T) {
	d := filepath.Join(t.TempDir(), "n3")
	if err := os.MkdirAll(filepath.Join(d, "raft", "snapshots"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "raft.db"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := emptyDir(d); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(d)
	if err != nil || len(entries) != 0 {
		t.Fatalf("after emptyDir: %v entries, %v", len(entries), err)
	}
	if err := emptyDir(filepath.Join(d, "absent")); err != nil {
		t.Fatalf("an absent directory: %v", err)
	}
}
