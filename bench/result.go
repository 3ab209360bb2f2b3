package bench

import "runtime"

// Result is the JSON the command prints: every figure of a run.
type Result struct {
	Go       string  `json:"go"`
	GOOS     string  `json:"goos"`
	GOARCH   string  `json:"goarch"`
	CPUs     int     `json:"cpus"`
	Store    string  `json:"store"`
	Seed     uint64  `json:"seed"`
	ElapsedS float64 `json:"elapsed_s"`
	// The machine's load (/proc/loadavg, 1 minute) when the run started and
	// ended: other processes competing for the cores skew the timings.
	LoadAvgStart float64 `json:"loadavg_start"`
	LoadAvgEnd   float64 `json:"loadavg_end"`

	// The workload.
	Links        int     `json:"links"` // live links after the run
	LinksWritten int     `json:"links_written"`
	LinksRevoked int     `json:"links_revoked"`
	Revocations  int     `json:"revocations"`
	Records      int     `json:"records"`
	Accounts     int     `json:"accounts"`
	Targets      int     `json:"targets"`
	GenerateS    float64 `json:"generate_s"`
	// The workload's shape (mem, backfill, live) and, for the streaming
	// shapes, what happened in it and the sample the check covers.
	Shape string `json:"shape"`
	// FanIn: runs of a tier merged at once (--fan-in, or the default).
	FanIn int `json:"fan_in"`
	// Clocks is the streaming shapes' model of TID clock ids: "host" (a
	// host's, changing with its restarts) or "account" (--account-clocks).
	Clocks          string  `json:"clocks,omitempty"`
	Updates         int     `json:"updates,omitempty"`
	BackfillDeletes int     `json:"backfill_deletes,omitempty"`
	Repos           int     `json:"repos,omitempty"`
	SampleTargets   int     `json:"sample_targets,omitempty"`
	SampleLinks     int     `json:"sample_links,omitempty"`
	GeneratorCPUS   float64 `json:"generator_cpu_s,omitempty"` // left out of the write figures
	// WriteGCCPUS is the runtime's estimate of the collector's CPU time
	// in the write phase, generator's and engine's alike (the model's
	// live heap is marked too): a part of both figures above.
	WriteGCCPUS float64 `json:"write_gc_cpu_s,omitempty"`

	// The process: peak resident set (VmHWM) over the whole run.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// The same sampled every 200 ms and split: the peak of anonymous
	// memory (what the process holds) and of mapped files' pages (table
	// metadata read in place: page cache), each with the phase it was
	// reached in, and the split at the sampled peak of the two together.
	PeakRSSAnonBytes   int64  `json:"peak_rss_anon_bytes,omitempty"`
	PeakRSSAnonPhase   string `json:"peak_rss_anon_phase,omitempty"`
	PeakRSSFileBytes   int64  `json:"peak_rss_file_bytes,omitempty"`
	PeakRSSFilePhase   string `json:"peak_rss_file_phase,omitempty"`
	PeakRSSSampledAnon int64  `json:"peak_rss_sampled_anon_bytes,omitempty"`
	PeakRSSSampledFile int64  `json:"peak_rss_sampled_file_bytes,omitempty"`
	PeakRSSPhase       string `json:"peak_rss_phase,omitempty"`
	// PeakHeapLiveBytes is the Go heap's live bytes at most (the
	// runtime's /gc/heap/live:bytes, sampled with the RSS): what the
	// process held after a collection, without the collector's slack.
	PeakHeapLiveBytes int64  `json:"peak_heap_live_bytes,omitempty"`
	PeakHeapLivePhase string `json:"peak_heap_live_phase,omitempty"`
	// The table metadata cache at the end (lsm.CatalogStats): its budget
	// (0: unbounded), the decoded metas it holds, and its traffic.
	MetaCacheBudget    int64  `json:"meta_cache_budget"`
	MetaCacheBytes     int64  `json:"meta_cache_bytes"`
	MetaCacheMetas     int    `json:"meta_cache_metas"`
	MetaCacheHits      uint64 `json:"meta_cache_hits"`
	MetaCacheMisses    uint64 `json:"meta_cache_misses"`
	MetaCacheEvictions uint64 `json:"meta_cache_evictions"`

	// Size.
	BytesPerLink          float64 `json:"bytes_per_link"`
	MetaBytesPerLink      float64 `json:"meta_bytes_per_link"`
	DataBytesPerLink      float64 `json:"data_bytes_per_link"`
	LinkTreeBytesPerLink  float64 `json:"links_tree_bytes_per_link"`
	RevTreeBytesPerLink   float64 `json:"revocations_tree_bytes_per_link"`
	LinkTreeMetaPerLink   float64 `json:"links_tree_meta_bytes_per_link"`
	RevTreeMetaPerLink    float64 `json:"revocations_tree_meta_bytes_per_link"`
	FilterBytesPerLink    float64 `json:"filter_bytes_per_link"`
	FenceBytesPerLink     float64 `json:"fence_bytes_per_link"`
	DataBytes             uint64  `json:"data_bytes"`
	MetaBytes             uint64  `json:"meta_bytes"`
	StoreBytes            int64   `json:"store_bytes"` // every object under the store, manifests included
	StoreObjects          int     `json:"store_objects"`
	BucketBytesPerLink    float64 `json:"bucket_bytes_per_link"` // StoreBytes / live links
	LocalDirBytes         int64   `json:"local_dir_bytes"`       // the DB's local directory: table metas and the manifest
	ManifestBytes         int64   `json:"manifest_bytes"`        // the local manifest copy
	WriteAmplification    float64 `json:"write_amplification"`   // bytes PUT in the write phase / bytes of the live tables it left (before --compact-full)
	Tables                int     `json:"tables"`
	LinkTables            int     `json:"links_tables"`
	RevTables             int     `json:"revocations_tables"`
	Runs                  int     `json:"runs"`
	Frames                int     `json:"frames"`
	Flushes               int     `json:"flushes"`
	Compactions           int     `json:"compactions"`
	RawBytesPerLink       float64 `json:"raw_bytes_per_link"` // 64-byte links + 32-byte revocations, uncompressed
	CompressionVsRawRatio float64 `json:"compression_ratio"`

	// With --breakdown: bytes per live link of the links tree's data that
	// each backlink field costs (the data shrinks by this much when the
	// field is blanked and the tables rebuilt); "target" is what is left
	// with every source field blanked.
	LinkDataBreakdown map[string]float64 `json:"links_data_bytes_per_link_by_field,omitempty"`

	// Writes.
	WriteLinksPerSecPerCore float64 `json:"write_links_per_sec_per_core"`
	WriteMethod             string  `json:"write_method"`
	WriteCPUS               float64 `json:"write_cpu_s"`
	WriteWallS              float64 `json:"write_wall_s"`
	WriteLinksPerSecWall    float64 `json:"write_links_per_sec_wall"`
	AddCPUS                 float64 `json:"write_add_cpu_s"`
	FlushCPUS               float64 `json:"write_flush_cpu_s"`
	CompactCPUS             float64 `json:"write_compact_cpu_s"`
	FlushLinksPerSecPerCore float64 `json:"flush_links_per_sec_per_core"`
	// The most local disk one compaction's spill files took at once in
	// the write phase (and, with --compact-full, in the full compaction).
	SpillPeakBytes            int64 `json:"spill_peak_bytes"`
	FullCompactSpillPeakBytes int64 `json:"full_compact_spill_peak_bytes,omitempty"`
	// With --compact-full: the major compaction after the write phase.
	FullCompactCPUS     float64 `json:"full_compact_cpu_s,omitempty"`
	FullCompactWallS    float64 `json:"full_compact_wall_s,omitempty"`
	FullCompactPutBytes int64   `json:"full_compact_put_bytes,omitempty"`
	RunsBeforeFull      int     `json:"runs_before_full_compaction,omitempty"`
	// The index as written, before --compact-full: its live tables' bytes
	// and its local directory's, per live link.
	BytesPerLinkBeforeFull         float64 `json:"bytes_per_link_before_full_compaction,omitempty"`
	TableBytesBeforeFull           uint64  `json:"table_bytes_before_full_compaction,omitempty"`
	LocalDirBytesPerLinkBeforeFull float64 `json:"local_dir_bytes_per_link_before_full_compaction,omitempty"`
	StorePuts                      int64   `json:"store_puts"`
	StorePutBytes                  int64   `json:"store_put_bytes"`

	// Queries.
	Queries        int     `json:"queries"`
	QueryTargets   int     `json:"query_targets"`
	QueryLinksMean float64 `json:"query_target_links_mean"`
	QueryP50us     float64 `json:"query_p50_us"`
	QueryP90us     float64 `json:"query_p90_us"`
	QueryP99us     float64 `json:"query_p99_us"`
	QueryMaxUs     float64 `json:"query_max_us"`
	QueryMeanUs    float64 `json:"query_mean_us"`
	// The process's CPU time (getrusage) per warm query: what a query
	// costs whatever else runs on the machine.
	QueryCPUP50us    float64 `json:"query_cpu_p50_us"`
	QueryMinorFaults int64   `json:"query_minor_faults"` // page faults over the timed warm queries
	QueryMajorFaults int64   `json:"query_major_faults"`
	QueryCPUP99us    float64 `json:"query_cpu_p99_us"`
	WarmGETs         int64   `json:"warm_query_gets"` // GETs during the timed warm pass (0: all from the frame cache)
	GetsPerQueryMax  int64   `json:"gets_per_query_max"`
	GetsPerQueryMean float64 `json:"gets_per_query_mean"`
	GetsMaxTarget    int     `json:"gets_max_target_links"`
	Round1GETsMax    int     `json:"round1_gets_max"`
	Round2GETsMax    int     `json:"round2_gets_max"`
	RoundTripsMax    int     `json:"round_trips_per_query_max"` // sequential rounds of GETs (round one, then each revocation pass that fetched)
	ColdQueries      int     `json:"cold_queries"`
	ColdQueryP50us   float64 `json:"cold_query_p50_us"`
	ColdQueryP99us   float64 `json:"cold_query_p99_us"`

	// Count of the mega target.
	Count1MMs         float64 `json:"count_1m_ms"`
	Count1MMinMs      float64 `json:"count_1m_min_ms"`
	Count1MCPUMs      float64 `json:"count_1m_cpu_ms"`    // process CPU time of the median count
	CountTargetLinks  int     `json:"count_target_links"` // links written to it
	CountTargetLive   int     `json:"count_target_live"`  // live links (what Count returns)
	CountColdMs       float64 `json:"count_1m_cold_ms"`
	CountColdGets     int64   `json:"count_1m_cold_gets"`
	CountCandidates   int     `json:"count_1m_candidates"`
	MegaPage100Ms     float64 `json:"mega_page_100_ms"` // Backlinks limit 100 of the mega target, warm
	MegaPage100ColdGs int64   `json:"mega_page_100_cold_gets"`
	LargestTargetLive int     `json:"largest_target_live,omitempty"` // streaming shapes: the most live links of a sample target

	// Pebble, fed the same links.
	PebbleVersion            string           `json:"pebble_version,omitempty"`
	PebbleBytesPerLink       float64          `json:"pebble_bytes_per_link,omitempty"` // directory after compaction, close, reopen, close / live links
	PebbleDirBytes           int64            `json:"pebble_dir_bytes,omitempty"`
	PebbleDirByKind          map[string]int64 `json:"pebble_dir_bytes_by_kind,omitempty"`
	PebbleDirBytesAfterLoad  int64            `json:"pebble_dir_bytes_after_load,omitempty"` // right after compaction and close: recycled WALs included
	PebbleDirByKindAfterLoad map[string]int64 `json:"pebble_dir_bytes_after_load_by_kind,omitempty"`
	PebbleSSTBytes           uint64           `json:"pebble_sst_bytes,omitempty"` // live sstables only
	PebbleSSTBytesPerLink    float64          `json:"pebble_sst_bytes_per_link,omitempty"`
	PebbleKeyBytesMean       float64          `json:"pebble_key_bytes_mean,omitempty"`
	PebbleQueryP50us         float64          `json:"pebble_query_p50_us,omitempty"`
	PebbleQueryP99us         float64          `json:"pebble_query_p99_us,omitempty"`
	PebbleQueryCPUP50us      float64          `json:"pebble_query_cpu_p50_us,omitempty"`
	PebbleLoadS              float64          `json:"pebble_load_s,omitempty"`
	PebbleCompactS           float64          `json:"pebble_compact_s,omitempty"`
	EddyVsPebbleBytes        float64          `json:"eddy_vs_pebble_bytes,omitempty"`

	// The model check: answers compared with the workload's bookkeeping.
	ModelCheck   string `json:"model_check"`
	ModelTargets int    `json:"model_targets"`

	// Goals (meaningful at --links 2000000).
	Goals map[string]bool `json:"goals"`
}

func newResult(seed uint64) *Result {
	return &Result{
		Go: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(),
		Seed: seed, Goals: map[string]bool{}, LoadAvgStart: loadAvg(),
	}
}

// setGoals records which of the goals the figures meet (the Pebble
// ratio only when Pebble ran).
func (res *Result) setGoals(pebble bool) {
	res.Goals["bytes_per_link<=16"] = res.BytesPerLink <= 16
	if pebble {
		res.Goals["bytes_per_link<=pebble/3"] = res.BytesPerLink*3 <= res.PebbleBytesPerLink
	}
	res.Goals["write_links_per_sec_per_core>=1e6"] = res.WriteLinksPerSecPerCore >= 1e6
	res.Goals["query_p50_us<=100"] = res.QueryP50us <= 100
	res.Goals["query_p99_us<=1000"] = res.QueryP99us <= 1000
	res.Goals["count_1m_ms<=1000"] = res.Count1MMs <= 1000
	// Issue 13's (at 1B links).
	res.Goals["bytes_per_link<=8"] = res.BytesPerLink <= 8
	res.Goals["meta_bytes_per_link<=0.25"] = res.MetaBytesPerLink <= 0.25
	res.Goals["peak_rss_bytes<=4e9"] = res.PeakRSSBytes <= 4e9
}
