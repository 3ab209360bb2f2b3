package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/objstore/miniotest"
	"github.com/eddy-backlinks/eddy/objstore/s3"
)

// Through an HTTP proxy that fails one request in ten of every kind (503
// SlowDown, 500 InternalError, a reset connection, a GET's body cut off
// half way, an answer held back up to 2 s), every Put, Get, GetRange,
// Size and List of the S3 store against a real MinIO still succeeds with
// the right bytes: the client retries server errors and resets, and a
// read whose body is lost is asked again (Store.read).
func TestThroughFaults(t *testing.T) {
	endpoint, _, _ := miniotest.StartMinIO(t)
	fp, err := miniotest.NewFaultProxy(endpoint, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	var mu sync.Mutex
	attempts := map[string]int64{} // by result
	s, err := s3.New(s3.Config{Endpoint: fp.Endpoint(), Region: "us-east-1", Bucket: miniotest.Bucket, Prefix: uniquePrefix(t.Name()),
		Insecure: true, PathStyle: true, AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey,
		OnAttempt: func(_, result string) { mu.Lock(); attempts[result]++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	fp.SetRate("", 0.1)
	r := rand.New(rand.NewPCG(1, 2))
	objects := map[string][]byte{}
	for i := range 40 {
		b := make([]byte, 1+r.IntN(200_000))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		key := fmt.Sprintf("tables/%03d", i)
		if err := s.Put(ctx, key, b); err != nil {
			t.Fatalf("put %s through faults: %v", key, err)
		}
		objects[key] = b
	}
	keys := make([]string, 0, len(objects))
	for k := range objects {
		keys = append(keys, k)
	}
	size := func(key string) {
		n, err := s.Size(ctx, key)
		if want := objects[key]; err != nil || n != int64(len(want)) {
			t.Fatalf("size %s: %d, %v; want %d", key, n, err, len(want))
		}
	}
	get := func(key string) {
		got, err := s.Get(ctx, key)
		if want := objects[key]; err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get %s: %d bytes, %v; want %d", key, len(got), err, len(want))
		}
	}
	getRange := func(key string) {
		want := objects[key]
		off := r.Int64N(int64(len(want)))
		n := 1 + r.Int64N(int64(len(want))-off)
		got, err := s.GetRange(ctx, key, off, n)
		if err != nil || !bytes.Equal(got, want[off:off+n]) {
			t.Fatalf("get range %s [%d, +%d): %d bytes, %v", key, off, n, len(got), err)
		}
	}
	put := func(key string) {
		if err := s.Put(ctx, key, objects[key]); err != nil {
			t.Fatalf("put %s again through faults: %v", key, err)
		}
	}
	for i := range 600 {
		key := keys[r.IntN(len(keys))]
		switch i % 10 {
		case 0:
			size(key)
		case 1:
			n := 0
			if err := s.List(ctx, "tables/", func(string, int64) error { n++; return nil }); err != nil || n != len(objects) {
				t.Fatalf("list: %d objects, %v; want %d", n, err, len(objects))
			}
		case 2, 3, 4:
			get(key)
		default:
			getRange(key)
		}
	}
	// Each kind of fault the store must survive is met at least once: the
	// proxy draws faults at random, and how many requests the loop above
	// makes depends on retries and timing, so a rare kind (a HEAD's 500,
	// among some sixty HEADs) may not have come up yet; its operation is
	// repeated, each answer checked, until it has.
	required := map[string]func(string){
		"truncate get": get, "truncate get_range": getRange, "reset get_range": getRange, "slowdown get_range": getRange,
		"delay get_range": getRange, "reset put": put, "internal head": size,
	}
	for i := 0; i < 2000; i++ {
		by, _, _ := fp.Injected()
		missing := ""
		for f := range required {
			if by[f] == 0 && (missing == "" || f < missing) {
				missing = f
			}
		}
		if missing == "" {
			break
		}
		required[missing](keys[r.IntN(len(keys))])
	}
	by, total, requests := fp.Injected()
	t.Logf("%d faults in %d requests: %v", total, requests, by)
	// Every request the client sent is counted, with its outcome: the
	// faults the calls above never saw (the client retried them) among them.
	mu.Lock()
	defer mu.Unlock()
	t.Logf("attempts by result: %v", attempts)
	kinds := func(fault string) (n int64) {
		for k, v := range by {
			if strings.HasPrefix(k, fault+" ") {
				n += v
			}
		}
		return n
	}
	var sent int64
	for _, n := range attempts {
		sent += n
	}
	// (A hedge cancelled before it reached the proxy is counted, not seen.)
	if sent < requests || sent-attempts[s3.AttemptCanceled] > requests {
		t.Errorf("%d requests counted (%d cancelled), the proxy saw %d", sent, attempts[s3.AttemptCanceled], requests)
	}
	if got, want := attempts[s3.AttemptSlowDown], kinds(miniotest.FaultSlowDown); got != want {
		t.Errorf("%d slow_down attempts counted, %d injected", got, want)
	}
	if got, want := attempts[s3.AttemptServerError], kinds(miniotest.FaultInternal); got != want {
		t.Errorf("%d server_error attempts counted, %d injected", got, want)
	}
	if got, want := attempts[s3.AttemptError], kinds(miniotest.FaultReset); got < want || want == 0 {
		t.Errorf("%d attempts without an answer counted, %d connections reset", got, want)
	}
	for f := range required {
		if by[f] == 0 {
			t.Errorf("no %q fault injected in 2,000 more tries: the schedule does not test it", f)
		}
	}
}

// A GET not answered within HedgeAfter is sent again and the first answer
// wins: with 30% of the ranged GETs held back 100 ms to 2 s and HedgeAfter
// 20 ms, every read returns the right bytes and the proxy sees more GETs
// than reads (the hedges).
func TestHedgedReads(t *testing.T) {
	endpoint, _, _ := miniotest.StartMinIO(t)
	fp, err := miniotest.NewFaultProxy(endpoint, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	s, err := s3.New(s3.Config{Endpoint: fp.Endpoint(), Region: "us-east-1", Bucket: miniotest.Bucket, Prefix: uniquePrefix(t.Name()),
		Insecure: true, PathStyle: true, AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey, HedgeAfter: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := s.Put(ctx, "k", data); err != nil {
		t.Fatal(err)
	}
	fp.SetFaults(miniotest.FaultDelay)
	fp.SetRate("get_range", 0.3)
	const reads = 50
	for i := range reads {
		off := int64(i * 500)
		got, err := s.GetRange(ctx, "k", off, 1000)
		if err != nil || !bytes.Equal(got, data[off:off+1000]) {
			t.Fatalf("read %d: %d bytes, %v", i, len(got), err)
		}
	}
	by, _, _ := fp.Injected()
	sent := fp.Requests("get_range")
	t.Logf("%d reads: %d GETs sent, %d held back", reads, sent, by["delay get_range"])
	if sent <= reads || by["delay get_range"] == 0 {
		t.Fatalf("%d reads sent %d GETs (%d held back): no hedge was sent", reads, sent, by["delay get_range"])
	}
}
