// Package corrupt counts and logs the corrupt tables a node meets, the same
// way wherever it meets them (queries, view loads, compaction).
package corrupt

import (
	"errors"

	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// Note counts err in c (eddy_corrupt_total{tree}; nil: not counted) and
// logs it with its tree and table if it is a corrupt table, and reports
// whether it was one. during says what met it.
func Note(c *prometheus.CounterVec, log hclog.Logger, during string, err error) bool {
	var ce *lsm.CorruptError
	if !errors.As(err, &ce) {
		return false
	}
	if c != nil {
		c.WithLabelValues(string(ce.Tree)).Inc()
	}
	log.Error("corrupt table", "during", during, "tree", ce.Tree, "table", ce.Table, "error", err)
	return true
}
