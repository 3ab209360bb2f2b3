package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/hashicorp/go-hclog"
)

// --join retries while the cluster cannot answer (an answer of 500 or
// more, as while it elects a leader) and returns the cluster's refusal (a
// removed ID, a wrong token), which stops the node instead of leaving it
// running outside the cluster.
func TestJoinClusterRetriesThenReturnsARefusal(t *testing.T) {
	defer func(p time.Duration) { joinBackoff.Min = p }(joinBackoff.Min)
	joinBackoff.Min = time.Millisecond
	serve := func(answers ...int) (string, *atomic.Int32) {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := int(calls.Add(1)) - 1
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(answers[min(n, len(answers)-1)])
			w.Write([]byte(`{"error":"Removed","message":"n3 was removed: join under a new --id"}`))
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://"), &calls
	}
	addr, calls := serve(http.StatusServiceUnavailable, http.StatusConflict)
	err := joinCluster(context.Background(), hclog.NewNullLogger(), []string{addr}, "token", "", cluster.JoinRequest{ID: "n3"}, nil)
	if err == nil || !strings.Contains(err.Error(), "join refused") || !strings.Contains(err.Error(), "new --id") || calls.Load() != 2 {
		t.Fatalf("after %d calls: %v", calls.Load(), err)
	}
	// Accepted: no error.
	addr, _ = serve(http.StatusOK)
	if err := joinCluster(context.Background(), hclog.NewNullLogger(), []string{addr}, "token", "", cluster.JoinRequest{ID: "n3"}, nil); err != nil {
		t.Fatal(err)
	}
}

// A refusal stops a new node; a member (Raft state of its own) only when
// the cluster removed it, not for a token refused while a rotation is
// half done.
func TestJoinRefusalStops(t *testing.T) {
	removed := fmt.Errorf("join refused: %w", &cluster.CallError{Status: http.StatusForbidden, Name: "Removed"})
	token := fmt.Errorf("join refused: %w", &cluster.CallError{Status: http.StatusUnauthorized, Name: "Unauthorized"})
	proxy := fmt.Errorf("join refused: %w", &cluster.CallError{Status: http.StatusForbidden, Name: "Forbidden"})
	for _, c := range []struct {
		member bool
		err    error
		stops  bool
	}{{false, token, true}, {false, removed, true}, {true, token, false}, {true, removed, true}, {true, proxy, false}} {
		if got := refusalStops(c.member, c.err); got != c.stops {
			t.Errorf("member %v, %v: stops %v, want %v", c.member, c.err, got, c.stops)
		}
	}
}

// A join asks whether the node is fresh at each try: a retried join whose
// first try took effect (its answer lost) goes out with what the node
// knows then, not what it knew at start, so the cluster does not refuse a
// new voter as a blank one (and stop it).
func TestJoinAsksFreshAtEachTry(t *testing.T) {
	defer func(p time.Duration) { joinBackoff.Min = p }(joinBackoff.Min)
	joinBackoff.Min = time.Millisecond
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req cluster.JoinRequest
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case calls.Add(1) == 1: // took effect, but its answer is a failure
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error":"JoinFailed","message":"leadership lost"}`))
		case req.Fresh:
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"error":"FreshVoter","message":"n3 is a voter"}`))
		default:
			w.Write([]byte(`{"joined":"n3"}`))
		}
	}))
	defer srv.Close()
	var entries atomic.Int32 // the node's Raft entries: none at first, some once joined
	fresh := func() bool { return entries.Add(1) == 1 }
	if err := joinCluster(context.Background(), hclog.NewNullLogger(), []string{strings.TrimPrefix(srv.URL, "http://")}, "token", "", cluster.JoinRequest{ID: "n3"}, fresh); err != nil {
		t.Fatalf("after %d calls: %v", calls.Load(), err)
	}
}

// A listener bound to every interface is advertised at the host Raft
// advertises: the env example's public API (0.0.0.0:8080) was recorded
// as such, so eddy-ctl status showed 0.0.0.0:8080 for every node (and an
// admin address so bound sent peers' readiness polls to themselves).
func TestAdvertisedAddresses(t *testing.T) {
	c := config{raftAddr: "10.0.0.1:7000"}
	for _, tc := range []struct{ bind, want string }{
		{"0.0.0.0:8080", "10.0.0.1:8080"},
		{"[::]:8080", "10.0.0.1:8080"},
		{":8080", "10.0.0.1:8080"},
		{"10.0.0.1:7001", "10.0.0.1:7001"},
		{"eddy1.example:8080", "eddy1.example:8080"},
	} {
		if got := advertised(tc.bind, c); got != tc.want {
			t.Errorf("advertised(%q) = %q, want %q", tc.bind, got, tc.want)
		}
	}
	c.raftAdvertise = "[fd00::1]:7000"
	if got := advertised("0.0.0.0:8080", c); got != "[fd00::1]:8080" {
		t.Errorf("with --raft-advertise: %q", got)
	}
	// Behind a NAT or a port forward: told as given, in the join too.
	c.adminAddr, c.httpAddr = "0.0.0.0:7001", "0.0.0.0:8080"
	if r := joinRequest(c, "n2"); r.Admin != "[fd00::1]:7001" || r.HTTP != "[fd00::1]:8080" {
		t.Errorf("join without the flags: %+v", r)
	}
	c.adminAdvertise, c.httpAdvertise = "203.0.113.7:17001", "eddy2.example:443"
	if r := joinRequest(c, "n2"); r.Admin != "203.0.113.7:17001" || r.HTTP != "eddy2.example:443" || r.Raft != "[fd00::1]:7000" {
		t.Errorf("join with --admin-advertise and --http-advertise: %+v", r)
	}
	if c.adminAdvertised() != "203.0.113.7:17001" || c.httpAdvertised() != "eddy2.example:443" {
		t.Errorf("advertised: %q %q", c.adminAdvertised(), c.httpAdvertised())
	}
}
