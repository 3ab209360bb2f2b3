// Package objstoretest is the conformance suite for objstore.Store
// implementations: Run checks every rule documented on objstore.Store.
package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/objstore"
)

// Run runs the conformance suite as subtests of t. newStore must return a
// new, empty Store for the subtest it is given, and arrange its cleanup.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, objstore.Store)
	}{
		{"NotFound", testNotFound},
		{"PutGet", testPutGet},
		{"EmptyObject", testEmptyObject},
		{"NoAliasing", testNoAliasing},
		{"IdempotentPut", testIdempotentPut},
		{"GetRange", testGetRange},
		{"List", testList},
		{"ListPrefix", testListPrefix},
		{"ListStop", testListStop},
		{"Delete", testDelete},
		{"InvalidKeys", testInvalidKeys},
		{"UnusualKeys", testUnusualKeys},
		{"CanceledContext", testCanceledContext},
		{"Concurrent", testConcurrent},
		{"ConcurrentConflict", testConcurrentConflict},
		{"Large", testLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustPut(t *testing.T, ctx context.Context, s objstore.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(ctx, key, data); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

func mustGet(t *testing.T, ctx context.Context, s objstore.Store, key string, want []byte) {
	t.Helper()
	got, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %d bytes %s, want %d bytes %s", key, len(got), abbrev(got), len(want), abbrev(want))
	}
}

func abbrev(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%x…", b[:16])
	}
	return fmt.Sprintf("%x", b)
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want one wrapping %v", what, err, target)
	}
}

type entry struct {
	Key  string
	Size int64
}

func list(t *testing.T, ctx context.Context, s objstore.Store, prefix string) []entry {
	t.Helper()
	var got []entry
	err := s.List(ctx, prefix, func(key string, size int64) error {
		got = append(got, entry{key, size})
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return got
}

func testNotFound(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	mustPut(t, ctx, s, "present", []byte("x"))
	for _, key := range []string{"missing", "present/child", "presen", "present2"} {
		_, err := s.Get(ctx, key)
		wantErr(t, "Get("+key+")", err, objstore.ErrNotFound)
		_, err = s.GetRange(ctx, key, 0, 1)
		wantErr(t, "GetRange("+key+", 0, 1)", err, objstore.ErrNotFound)
		_, err = s.GetRange(ctx, key, 0, 0)
		wantErr(t, "GetRange("+key+", 0, 0)", err, objstore.ErrNotFound)
		_, err = s.Size(ctx, key)
		wantErr(t, "Size("+key+")", err, objstore.ErrNotFound)
	}
	// A directory of other keys is not an object.
	mustPut(t, ctx, s, "dir/a", []byte("x"))
	_, err := s.Get(ctx, "dir")
	wantErr(t, "Get(dir) with dir/a stored", err, objstore.ErrNotFound)
	_, err = s.Size(ctx, "dir")
	wantErr(t, "Size(dir) with dir/a stored", err, objstore.ErrNotFound)
	if err := s.Delete(ctx, "dir"); err != nil {
		t.Fatalf("Delete(dir) with dir/a stored: %v", err)
	}
	mustGet(t, ctx, s, "dir/a", []byte("x"))
}

func testPutGet(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	objs := map[string][]byte{
		"a":                   []byte("alpha"),
		"b/c":                 []byte("bravo charlie"),
		"b/d/e.sst":           randBytes(1, 4096),
		"tables/000001.sst":   randBytes(2, 10_000),
		"one-byte":            {0},
		"binary-with-newline": []byte("\x00\r\n\xff"),
	}
	for k, v := range objs {
		mustPut(t, ctx, s, k, v)
	}
	for k, v := range objs {
		mustGet(t, ctx, s, k, v)
		n, err := s.Size(ctx, k)
		if err != nil || n != int64(len(v)) {
			t.Fatalf("Size(%q) = %d, %v; want %d", k, n, err, len(v))
		}
	}
}

func testEmptyObject(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	mustPut(t, ctx, s, "empty", nil)
	mustPut(t, ctx, s, "empty", []byte{}) // same (empty) content: idempotent
	got, err := s.Get(ctx, "empty")
	if err != nil || len(got) != 0 {
		t.Fatalf("Get(empty) = %q, %v; want empty, nil", got, err)
	}
	if n, err := s.Size(ctx, "empty"); err != nil || n != 0 {
		t.Fatalf("Size(empty) = %d, %v; want 0, nil", n, err)
	}
	if b, err := s.GetRange(ctx, "empty", 0, 0); err != nil || len(b) != 0 {
		t.Fatalf("GetRange(empty, 0, 0) = %q, %v; want empty, nil", b, err)
	}
	_, err = s.GetRange(ctx, "empty", 0, 1)
	wantErr(t, "GetRange(empty, 0, 1)", err, objstore.ErrRange)
	if got := list(t, ctx, s, ""); !slices.Equal(got, []entry{{"empty", 0}}) {
		t.Fatalf("List = %v, want [{empty 0}]", got)
	}
	err = s.Put(ctx, "empty", []byte("x"))
	wantErr(t, "Put(empty, x) over the empty object", err, objstore.ErrExists)
}

func testNoAliasing(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	data := []byte("original")
	mustPut(t, ctx, s, "k", data)
	copy(data, "XXXXXXXX") // Put must not keep data
	mustGet(t, ctx, s, "k", []byte("original"))
	got, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	copy(got, "YYYYYYYY") // the caller owns what Get returns
	mustGet(t, ctx, s, "k", []byte("original"))
	r, err := s.GetRange(ctx, "k", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	copy(r, "ZZZ")
	mustGet(t, ctx, s, "k", []byte("original"))
}

func testIdempotentPut(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	data := randBytes(3, 3000)
	mustPut(t, ctx, s, "imm/obj", data)
	mustPut(t, ctx, s, "imm/obj", slices.Clone(data)) // same bytes: succeeds
	mustPut(t, ctx, s, "imm/obj", data)

	other := slices.Clone(data)
	other[1500] ^= 1 // same length, one bit differs
	err := s.Put(ctx, "imm/obj", other)
	wantErr(t, "Put of different bytes, same length", err, objstore.ErrExists)
	err = s.Put(ctx, "imm/obj", data[:2999])
	wantErr(t, "Put of a prefix of the content", err, objstore.ErrExists)
	err = s.Put(ctx, "imm/obj", append(slices.Clone(data), 0))
	wantErr(t, "Put of longer content", err, objstore.ErrExists)
	err = s.Put(ctx, "imm/obj", nil)
	wantErr(t, "Put of empty content over non-empty", err, objstore.ErrExists)
	mustGet(t, ctx, s, "imm/obj", data)
	if got := list(t, ctx, s, ""); !slices.Equal(got, []entry{{"imm/obj", 3000}}) {
		t.Fatalf("List after rejected Puts = %v, want only imm/obj", got)
	}
}

func testGetRange(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	data := randBytes(4, 1000)
	mustPut(t, ctx, s, "r", data)
	size := int64(len(data))
	ok := []struct{ off, n int64 }{
		{0, size}, {0, 1}, {size - 1, 1}, {1, size - 1}, {10, 100},
		{500, 500}, {999, 1}, {0, 0}, {500, 0}, {size, 0},
	}
	for _, r := range ok {
		got, err := s.GetRange(ctx, "r", r.off, r.n)
		if err != nil {
			t.Fatalf("GetRange(r, %d, %d): %v", r.off, r.n, err)
		}
		if int64(len(got)) != r.n || !bytes.Equal(got, data[r.off:r.off+r.n]) {
			t.Fatalf("GetRange(r, %d, %d) = %d bytes %s, want %s", r.off, r.n, len(got), abbrev(got), abbrev(data[r.off:r.off+r.n]))
		}
	}
	bad := []struct{ off, n int64 }{
		{0, size + 1}, {size - 1, 2}, {size, 1}, {size + 1, 0}, {size + 1, 1},
		{5000, 10}, {-1, 1}, {0, -1}, {-5, -5}, {1, 1<<63 - 1}, {1<<63 - 1, 1},
	}
	for _, r := range bad {
		got, err := s.GetRange(ctx, "r", r.off, r.n)
		if !errors.Is(err, objstore.ErrRange) {
			t.Fatalf("GetRange(r, %d, %d) = %d bytes, %v; want an error wrapping ErrRange", r.off, r.n, len(got), err)
		}
		if errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("GetRange(r, %d, %d): %v also wraps ErrNotFound", r.off, r.n, err)
		}
	}
	// A bad range of a missing key reports ErrNotFound (when the range
	// arguments themselves are well-formed).
	_, err := s.GetRange(ctx, "missing", 0, size+1)
	wantErr(t, "GetRange(missing, 0, size+1)", err, objstore.ErrNotFound)
}

func testList(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	if got := list(t, ctx, s, ""); len(got) != 0 {
		t.Fatalf("List of an empty store = %v", got)
	}
	// Byte order, not directory order: '-' (0x2d) and '.' (0x2e) sort
	// before '/' (0x2f), '0' (0x30) after it; upper case before lower.
	// ("a/b" cannot be an object too: it is a directory of keys.)
	keys := []string{
		"a-c", "a.d", "a0", "A", "b", "a/a", "z/y/x/w", "a/b-", "a/b0",
		"m", "a/b/c/d/e/f", "a!", "a/b/c-", "a/b/c0",
	}
	want := make([]entry, 0, len(keys))
	for i, k := range keys {
		mustPut(t, ctx, s, k, randBytes(uint64(i), i+1))
		want = append(want, entry{k, int64(i + 1)})
	}
	slices.SortFunc(want, func(a, b entry) int { return strings.Compare(a.Key, b.Key) })
	got := list(t, ctx, s, "")
	if !slices.Equal(got, want) {
		t.Fatalf("List(\"\") =\n  %v\nwant\n  %v", got, want)
	}
}

func testListPrefix(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	keys := []string{
		"tables/000001.sst", "tables/000002.sst", "tables/000010.sst",
		"tables-old/000001.sst", "tablesx", "manifest/000001", "manifest/000002",
		"wal/a/b/c", "wal/a/bb", "wal/ab",
	}
	for _, k := range keys {
		mustPut(t, ctx, s, k, []byte(k))
	}
	cases := []struct {
		prefix string
		want   []string
	}{
		{"tables/", []string{"tables/000001.sst", "tables/000002.sst", "tables/000010.sst"}},
		{"tables/00000", []string{"tables/000001.sst", "tables/000002.sst"}},
		{"tables", []string{"tables-old/000001.sst", "tables/000001.sst", "tables/000002.sst", "tables/000010.sst", "tablesx"}},
		{"tables/000002.sst", []string{"tables/000002.sst"}},
		{"tables/000002.sst/", nil},
		{"tables/000002.sstx", nil},
		{"t", []string{"tables-old/000001.sst", "tables/000001.sst", "tables/000002.sst", "tables/000010.sst", "tablesx"}},
		{"manifest/", []string{"manifest/000001", "manifest/000002"}},
		{"wal/a", []string{"wal/a/b/c", "wal/a/bb", "wal/ab"}},
		{"wal/a/", []string{"wal/a/b/c", "wal/a/bb"}},
		{"wal/a/b", []string{"wal/a/b/c", "wal/a/bb"}},
		{"wal/a/b/", []string{"wal/a/b/c"}},
		{"nothing", nil},
		{"nothing/", nil},
		{"zzz", nil},
	}
	for _, c := range cases {
		got := list(t, ctx, s, c.prefix)
		var want []entry
		for _, k := range c.want {
			want = append(want, entry{k, int64(len(k))})
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %v, want %v", c.prefix, got, want)
		}
	}
	all := list(t, ctx, s, "")
	if len(all) != len(keys) {
		t.Errorf("List(\"\") has %d keys, want %d", len(all), len(keys))
	}
	for _, p := range []string{"/", "/tables", "tab\\les", "tab\x00", "t\x7f", "é", strings.Repeat("a", objstore.MaxKeyLen+1)} {
		err := s.List(ctx, p, func(string, int64) error {
			t.Errorf("List(%q) called fn", p)
			return nil
		})
		wantErr(t, fmt.Sprintf("List(%q)", p), err, objstore.ErrInvalidKey)
	}
}

func testListStop(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	for i := range 5 {
		mustPut(t, ctx, s, fmt.Sprintf("k%d", i), []byte{byte(i)})
	}
	stop := errors.New("stop here")
	var seen []string
	err := s.List(ctx, "", func(key string, _ int64) error {
		seen = append(seen, key)
		if len(seen) == 2 {
			return stop
		}
		return nil
	})
	wantErr(t, "List whose fn fails", err, stop)
	if !slices.Equal(seen, []string{"k0", "k1"}) {
		t.Fatalf("List called fn for %v after fn failed, want [k0 k1]", seen)
	}
	// fn may call the store, including deleting what it is given.
	err = s.List(ctx, "", func(key string, size int64) error {
		b, err := s.Get(ctx, key)
		if err != nil {
			return err
		}
		if int64(len(b)) != size {
			return fmt.Errorf("%s: Get gave %d bytes, List said %d", key, len(b), size)
		}
		return s.Delete(ctx, key)
	})
	if err != nil {
		t.Fatalf("List calling Get and Delete: %v", err)
	}
	if got := list(t, ctx, s, ""); len(got) != 0 {
		t.Fatalf("List after deleting everything = %v", got)
	}
}

func testDelete(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	if err := s.Delete(ctx, "never-existed"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if err := s.Delete(ctx, "no/such/dir/key"); err != nil {
		t.Fatalf("Delete of a missing key in a missing directory: %v", err)
	}
	mustPut(t, ctx, s, "d/x", []byte("one"))
	mustPut(t, ctx, s, "d/y", []byte("two"))
	if err := s.Delete(ctx, "d/x"); err != nil {
		t.Fatalf("Delete(d/x): %v", err)
	}
	_, err := s.Get(ctx, "d/x")
	wantErr(t, "Get after Delete", err, objstore.ErrNotFound)
	_, err = s.Size(ctx, "d/x")
	wantErr(t, "Size after Delete", err, objstore.ErrNotFound)
	_, err = s.GetRange(ctx, "d/x", 0, 1)
	wantErr(t, "GetRange after Delete", err, objstore.ErrNotFound)
	if got := list(t, ctx, s, ""); !slices.Equal(got, []entry{{"d/y", 3}}) {
		t.Fatalf("List after Delete = %v, want [{d/y 3}]", got)
	}
	if err := s.Delete(ctx, "d/x"); err != nil {
		t.Fatalf("second Delete(d/x): %v", err)
	}
	mustGet(t, ctx, s, "d/y", []byte("two"))
	// After a Delete the key is free for new content.
	mustPut(t, ctx, s, "d/x", []byte("three!"))
	mustGet(t, ctx, s, "d/x", []byte("three!"))
	// Deleting every key of a directory leaves no trace in List.
	for _, k := range []string{"d/x", "d/y"} {
		if err := s.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got := list(t, ctx, s, ""); len(got) != 0 {
		t.Fatalf("List after deleting all = %v", got)
	}
}

// InvalidKeys are keys that every Store must reject with ErrInvalidKey.
var InvalidKeys = []string{
	"",
	"/",
	"/abs",
	"a/",
	"a//b",
	".",
	"..",
	"../escape",
	"a/../b",
	"a/..",
	"a/./b",
	".hidden",
	"a/.tmp",
	"tab\there",
	"new\nline",
	"nul\x00",
	"del\x7f",
	"back\\slash",
	"caf\xc3\xa9",
	"\xff",
	strings.Repeat("k", objstore.MaxKeyLen+1),
	strings.Repeat("s", objstore.MaxSegmentLen+1),
	"a/" + strings.Repeat("s", objstore.MaxSegmentLen+1) + "/b",
}

func testInvalidKeys(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	for _, key := range InvalidKeys {
		short := key
		if len(short) > 40 {
			short = short[:40] + "…"
		}
		if err := objstore.ValidateKey(key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", short, err)
		}
		wantErr(t, fmt.Sprintf("Put(%q)", short), s.Put(ctx, key, []byte("x")), objstore.ErrInvalidKey)
		_, err := s.Get(ctx, key)
		wantErr(t, fmt.Sprintf("Get(%q)", short), err, objstore.ErrInvalidKey)
		_, err = s.GetRange(ctx, key, 0, 1)
		wantErr(t, fmt.Sprintf("GetRange(%q)", short), err, objstore.ErrInvalidKey)
		_, err = s.Size(ctx, key)
		wantErr(t, fmt.Sprintf("Size(%q)", short), err, objstore.ErrInvalidKey)
		wantErr(t, fmt.Sprintf("Delete(%q)", short), s.Delete(ctx, key), objstore.ErrInvalidKey)
	}
	if got := list(t, ctx, s, ""); len(got) != 0 {
		t.Fatalf("invalid Puts stored %v", got)
	}
}

func testUnusualKeys(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	seg := strings.Repeat("m", objstore.MaxSegmentLen)
	longest := seg[:200] + "/" + seg[:200] + "/"
	longest += strings.Repeat("z", objstore.MaxKeyLen-len(longest))
	keys := []string{
		"with space", " leading space", "trailing space ",
		"q?x=1&y=2", "hash#frag", "per%20cent", "plus+sign", "semi;colon:colon",
		"star*", "tilde~", "a..b", "a.", "x/y.", "quote\"'`", "<angle>", "[b]{c}|pipe",
		"!$(),=@^", "UPPER/lower", seg, longest,
	}
	for i, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			t.Fatalf("ValidateKey(%q): %v", k, err)
		}
		mustPut(t, ctx, s, k, []byte{byte(i)})
	}
	for i, k := range keys {
		mustGet(t, ctx, s, k, []byte{byte(i)})
	}
	var want []entry
	for _, k := range keys {
		want = append(want, entry{k, 1})
	}
	slices.SortFunc(want, func(a, b entry) int { return strings.Compare(a.Key, b.Key) })
	if got := list(t, ctx, s, ""); !slices.Equal(got, want) {
		t.Fatalf("List =\n  %v\nwant\n  %v", got, want)
	}
	for _, k := range keys {
		var wantP []entry
		for _, e := range want {
			if strings.HasPrefix(e.Key, k) {
				wantP = append(wantP, e)
			}
		}
		if got := list(t, ctx, s, k); !slices.Equal(got, wantP) {
			t.Fatalf("List(%q) = %v, want %v", k, got, wantP)
		}
	}
}

func testCanceledContext(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	mustPut(t, ctx, s, "there", []byte("x"))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	wantErr(t, "Put with a canceled context", s.Put(canceled, "new", []byte("x")), context.Canceled)
	_, err := s.Get(canceled, "there")
	wantErr(t, "Get with a canceled context", err, context.Canceled)
	_, err = s.GetRange(canceled, "there", 0, 1)
	wantErr(t, "GetRange with a canceled context", err, context.Canceled)
	_, err = s.Size(canceled, "there")
	wantErr(t, "Size with a canceled context", err, context.Canceled)
	err = s.List(canceled, "", func(string, int64) error { return nil })
	wantErr(t, "List with a canceled context", err, context.Canceled)
	wantErr(t, "Delete with a canceled context", s.Delete(canceled, "there"), context.Canceled)
	// Nothing happened.
	_, err = s.Get(ctx, "new")
	wantErr(t, "Get of a key Put with a canceled context", err, objstore.ErrNotFound)
	mustGet(t, ctx, s, "there", []byte("x"))
}

func testConcurrent(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	const workers, perWorker = 8, 12
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker*4)
	same := randBytes(99, 20_000)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				key := fmt.Sprintf("c/%02d/%03d", w, i)
				data := randBytes(uint64(w*1000+i), 1+(w*7919+i*104729)%30_000)
				if err := s.Put(ctx, key, data); err != nil {
					errs <- fmt.Errorf("Put(%s): %w", key, err)
					continue
				}
				// Every worker also Puts the same bytes to one key.
				if err := s.Put(ctx, "c/shared", same); err != nil {
					errs <- fmt.Errorf("Put(c/shared) #%d.%d: %w", w, i, err)
				}
				got, err := s.Get(ctx, key)
				if err != nil || !bytes.Equal(got, data) {
					errs <- fmt.Errorf("Get(%s) after Put: %d bytes, %v", key, len(got), err)
				}
				// Reads of the shared key see all of it or nothing.
				got, err = s.Get(ctx, "c/shared")
				if err != nil || !bytes.Equal(got, same) {
					errs <- fmt.Errorf("Get(c/shared): %d bytes, %v", len(got), err)
				}
				r, err := s.GetRange(ctx, key, int64(len(data)/2), int64(len(data)-len(data)/2))
				if err != nil || !bytes.Equal(r, data[len(data)/2:]) {
					errs <- fmt.Errorf("GetRange(%s): %d bytes, %v", key, len(r), err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := list(t, ctx, s, "c/")
	if len(got) != workers*perWorker+1 {
		t.Fatalf("List(c/) has %d keys, want %d", len(got), workers*perWorker+1)
	}
}

func testConcurrentConflict(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	const writers = 8
	for round := range 3 {
		key := fmt.Sprintf("race/%d", round)
		datas := make([][]byte, writers)
		for i := range datas {
			datas[i] = randBytes(uint64(round*100+i), 50_000)
		}
		results := make([]error, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				<-start
				results[i] = s.Put(ctx, key, datas[i])
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range results {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: Puts %d and %d of different data both succeeded", round, winner, i)
				}
				winner = i
			case !errors.Is(err, objstore.ErrExists):
				t.Fatalf("round %d: Put %d: %v, want nil or ErrExists", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no Put succeeded", round)
		}
		mustGet(t, ctx, s, key, datas[winner])
	}
}

func testLarge(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	const size = 5 << 20
	data := randBytes(5, size)
	mustPut(t, ctx, s, "large/obj", data)
	mustPut(t, ctx, s, "large/obj", data) // idempotent, compares 5 MiB
	mustGet(t, ctx, s, "large/obj", data)
	if n, err := s.Size(ctx, "large/obj"); err != nil || n != size {
		t.Fatalf("Size = %d, %v; want %d", n, err, size)
	}
	for _, r := range []struct{ off, n int64 }{
		{0, 4096}, {size - 4096, 4096}, {size - 1, 1}, {1 << 20, 3 << 20}, {12345, 1}, {0, size},
	} {
		got, err := s.GetRange(ctx, "large/obj", r.off, r.n)
		if err != nil || !bytes.Equal(got, data[r.off:r.off+r.n]) {
			t.Fatalf("GetRange(%d, %d) = %d bytes, %v", r.off, r.n, len(got), err)
		}
	}
	_, err := s.GetRange(ctx, "large/obj", size-10, 11)
	wantErr(t, "GetRange past the end of a large object", err, objstore.ErrRange)
	other := slices.Clone(data)
	other[size-1] ^= 0xff
	wantErr(t, "Put of a different large object", s.Put(ctx, "large/obj", other), objstore.ErrExists)
	if got := list(t, ctx, s, "large/"); !slices.Equal(got, []entry{{"large/obj", size}}) {
		t.Fatalf("List(large/) = %v", got)
	}
}
