package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"
)

// handleCluster asks every member for its status, concurrently.
func (a *Admin) handleCluster(w http.ResponseWriter, r *http.Request) {
	// The whole answer within PeerStatusTimeout, the wait below included.
	deadline := time.Now().Add(PeerStatusTimeout)
	self := a.statusWithAddresses(r.Context())
	out := make([]NodeStatus, len(self.Servers))
	var wg sync.WaitGroup
	for i, s := range self.Servers {
		if s.ID == self.ID {
			out[i] = self
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st NodeStatus
			err := errors.New("admin address unknown")
			if s.Admin != "" {
				ctx, cancel := context.WithDeadline(r.Context(), deadline)
				err = a.call(ctx, s.Admin, http.MethodGet, "/admin/status", nil, &st)
				cancel()
				if err != nil && ctx.Err() != nil && r.Context().Err() == nil {
					err = fmt.Errorf("no answer within %v: %w", PeerStatusTimeout, err)
				}
			}
			if err != nil {
				st = NodeStatus{ID: s.ID, Error: err.Error(), LastContactMs: -1}
			}
			out[i] = st
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	writeJSON(w, out)
}

// addressWait bounds how long a node's cluster status waits for the
// addresses of a member that just joined.
const addressWait = 2 * time.Second

// statusWithAddresses is this node's status, once it knows every member's
// addresses or after addressWait (the whole answer stays within
// PeerStatusTimeout: the members are asked in what is left of it). A node takes a configuration as it
// appends it, and the addresses of a member that just joined, which come
// before it in the log (JoinAs), once it has applied them.
func (a *Admin) statusWithAddresses(ctx context.Context) NodeStatus {
	self := a.Status()
	// A member whose addresses are recorded without an admin address (it
	// joined without one) is not waited for.
	missing := func(s ServerStatus) bool {
		_, known := a.node.FSM.Node(s.ID)
		return s.Admin == "" && !known
	}
	if !slices.ContainsFunc(self.Servers, missing) {
		return self
	}
	wait := time.NewTimer(addressWait)
	defer wait.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for slices.ContainsFunc(self.Servers, missing) {
		select {
		case <-ctx.Done():
			return self
		case <-wait.C:
			return self
		case <-tick.C:
			self = a.Status()
		}
	}
	return self
}
