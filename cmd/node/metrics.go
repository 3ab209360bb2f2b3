package main

import (
	"github.com/eddy-backlinks/eddy/cluster"
	"github.com/eddy-backlinks/eddy/ingest"
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/eddy-backlinks/eddy/version"
	"github.com/prometheus/client_golang/prometheus"
	"syscall"
)

// nodeCollectors are the node's metrics that read state at scrape time:
// the frame cache, the reader's large reads, the compaction backlog (at
// fanIn), the replicated garbage list and the build.
func nodeCollectors(node *cluster.Node, cache *lsm.FrameCache, reader *lsm.Reader, fanIn int) []prometheus.Collector {
	counter := func(name, help string, f func(lsm.CacheStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(cache.Stats())) })
	}
	gauge := func(name, help string, f func(lsm.CacheStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(cache.Stats()) })
	}
	cs := []prometheus.Collector{
		counter("eddy_frame_cache_hits_total", "Decoded-frame cache lookups that found the frame.", func(s lsm.CacheStats) uint64 { return s.Hits }),
		counter("eddy_frame_cache_misses_total", "Decoded-frame cache lookups that did not (the frame is fetched from the store).", func(s lsm.CacheStats) uint64 { return s.Misses }),
		counter("eddy_frame_cache_evictions_total", "Frames evicted from the decoded-frame cache to stay within its bound.", func(s lsm.CacheStats) uint64 { return s.Evictions }),
		gauge("eddy_frame_cache_hit_ratio", "Hits / (hits + misses) since start (0 before any lookup); rate() of the counters gives a windowed ratio.", func(s lsm.CacheStats) float64 { return s.HitRate() }),
		gauge("eddy_frame_cache_bytes", "Decoded bytes held by the frame cache.", func(s lsm.CacheStats) float64 { return float64(s.Bytes) }),
		gauge("eddy_frame_cache_max_bytes", "Bound of the frame cache (--cache-bytes).", func(s lsm.CacheStats) float64 { return float64(s.MaxBytes) }),
		gauge("eddy_frame_cache_frames", "Frames held by the frame cache.", func(s lsm.CacheStats) float64 { return float64(s.Frames) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_large_read_bytes", Help: "Memory that reads of large targets (counts, DID lists, /links/all) hold of --large-read-memory."}, func() float64 {
			_, held, _ := reader.LargeReadStats()
			return float64(held)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_large_read_waiting", Help: "Reads of large targets waiting for their share of --large-read-memory."}, func() float64 {
			_, _, waiting := reader.LargeReadStats()
			return float64(waiting)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_gc_pending_tables", Help: "Tables that left the manifest and wait for deletion (the replicated garbage list; the same on every node)."}, func() float64 {
			return float64(node.FSM.GarbageStats().Tables)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_gc_pending_bytes", Help: "Bytes (data and meta) of the tables waiting for deletion."}, func() float64 {
			return float64(node.FSM.GarbageStats().Bytes)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_build_info", Help: "1, labelled with the build's version.", ConstLabels: prometheus.Labels{"version": version.Version}}, func() float64 { return 1 }),
	}
	for _, tree := range lsm.Trees {
		labels := prometheus.Labels{"tree": string(tree)}
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_compaction_backlog_runs", Help: "Runs waiting for a compaction (the runs of the merges due, counted one merge after another), by tree, in the applied manifest.", ConstLabels: labels}, func() float64 {
				return float64(ingest.CompactionBacklog(node.FSM.Manifest(), tree, fanIn))
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_lsm_runs", Help: "Runs in the applied manifest, by tree.", ConstLabels: labels}, func() float64 {
				return float64(len(node.FSM.Manifest().RunsOf(tree)))
			}),
		)
	}
	return cs
}

// gcStatus is the garbage part of a node's status: the live tables of the
// applied manifest and the replicated list of tables waiting for deletion.
func gcStatus(node *cluster.Node) map[string]any {
	m := node.FSM.Manifest()
	var tables int
	var bytes uint64
	for _, r := range m.Runs {
		for _, t := range r.Tables {
			tables++
			bytes += t.DataBytes + t.MetaBytes
		}
	}
	pending := node.FSM.GarbageStats()
	return map[string]any{"live_tables": tables, "live_bytes": bytes, "pending_tables": pending.Tables, "pending_bytes": pending.Bytes}
}

// dataDirCollector is eddy_data_dir_free_bytes: the space left to the
// node's data directory (Raft log and snapshots, table metadata). Near 0
// the node can no longer append to its Raft log: it logs "no space left
// on device", falls behind, and /readyz turns 503 after --ready-lag-max.
func dataDirCollector(dir string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eddy_data_dir_free_bytes", Help: "Bytes available to this node in its data directory's filesystem (-1 when unknown)."}, func() float64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return -1
		}
		return float64(st.Bavail) * float64(st.Bsize)
	})
}
