package corrupt

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/eddy-backlinks/eddy/internal/metricstest"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

func TestNote(t *testing.T) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eddy_corrupt_total"}, []string{"tree"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	var logs strings.Builder
	log := hclog.New(&hclog.LoggerOptions{Output: &logs})
	ce := fmt.Errorf("reading: %w", &lsm.CorruptError{Tree: lsm.TreeRevocations, Table: "t123", Err: lsm.ErrCorrupt})
	if !Note(c, log, "a query", ce) {
		t.Fatal("a wrapped CorruptError was not noted")
	}
	if Note(c, log, "a query", errors.New("other")) || Note(nil, log, "a query", nil) {
		t.Fatal("an error that is not corruption was noted")
	}
	if n := metricstest.Values(t, reg)["eddy_corrupt_total{tree=revocations}"]; n != 1 {
		t.Fatalf("counted %v, want 1", n)
	}
	if !strings.Contains(logs.String(), "t123") || !strings.Contains(logs.String(), "a query") {
		t.Fatalf("log %q names neither the table nor what met it", logs.String())
	}
}
