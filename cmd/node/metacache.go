package main

import (
	"github.com/eddy-backlinks/eddy/lsm"
	"github.com/prometheus/client_golang/prometheus"
)

// metaCacheCollectors are the metrics of the table metadata catalog: the
// tables mapped (the default) or the decoded cache (--meta-cache-bytes N),
// read at scrape time.
func metaCacheCollectors(cat *lsm.Catalog) []prometheus.Collector {
	counter := func(name, help string, f func(lsm.CatalogStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(cat.Stats())) })
	}
	gauge := func(name, help string, f func(lsm.CatalogStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(cat.Stats()) })
	}
	return []prometheus.Collector{
		counter("eddy_meta_cache_hits_total", "Table metadata lookups that found it mapped or decoded in memory.", func(s lsm.CatalogStats) uint64 { return s.Hits }),
		counter("eddy_meta_cache_misses_total", "Table metadata lookups that mapped it, or decoded it again, from local disk (or fetched it).", func(s lsm.CatalogStats) uint64 { return s.Misses }),
		counter("eddy_meta_local_damaged_total", "Local table metadata files that failed their checks (a damaged disk): each was discarded and fetched again from the bucket.", func(s lsm.CatalogStats) uint64 { return s.LocalDamaged }),
		counter("eddy_meta_cache_evictions_total", "Decoded table metadata let go to stay within --meta-cache-bytes.", func(s lsm.CatalogStats) uint64 { return s.Evictions }),
		gauge("eddy_meta_cache_bytes", "Table metadata held on the heap, bytes (estimated; a mapped table's header fields only).", func(s lsm.CatalogStats) float64 { return float64(s.Bytes) }),
		gauge("eddy_meta_cache_max_bytes", "Bound of the decoded table metadata (--meta-cache-bytes; 0: mapped, no bound needed).", func(s lsm.CatalogStats) float64 { return float64(s.Budget) }),
		gauge("eddy_meta_cache_tables", "Tables whose metadata is held mapped or decoded.", func(s lsm.CatalogStats) float64 { return float64(s.Metas) }),
	}
}
