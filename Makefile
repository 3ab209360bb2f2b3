# Eddy: a backlink index for the AT Protocol network.
#
#   make build   builds bin/eddy-node, bin/eddy-ctl and bin/eddy-bench (the storage benchmark, run by eddy-ctl bench)
#   make test    installs what the tests use (MinIO, the Jetstream v2 server, systemd-analyze, Chromium, e2e/jsclient's npm packages) if missing, then vets and tests everything
#   make race    the race detector on the packages with shared state (.ci/run runs it after make test)
#   make bench   runs the Go benchmarks (figures go to docs/bench.md by hand, with the command)
#   make fuzz    runs every fuzz target for FUZZTIME each
#   make bench-peers  Eddy, Pebble and PostgreSQL on one workload (docs/bench.md, "Peers"); make bench-scale: docs/scale.md
#   make bench-clients  other clients' latency while one floods a node (a closed loop, then 10x the capacity open loop), per-client limits on and off (docs/bench.md)
#   make chaos   20 seeded fault schedules on a three-node cluster, every answer checked (docs/reliability.md)

GO        ?= go
GOBIN     := $(shell $(GO) env GOPATH)/bin
FUZZTIME  ?= 30s
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/eddy-backlinks/eddy/version.Version=$(VERSION)

.PHONY: all build test race vet bench bench-peers chaos fuzz minio toxiproxy jetstream testdeps demo demo-down run e2e-full clean

all: build

build:
	@mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/eddy-node ./cmd/node
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/eddy-ctl ./cmd/ctl
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/eddy-bench ./cmd/bench

# The main job on embedded defaults: a three-node cluster on loopback ingests
# the bundled capture of the live network and answers real queries.
demo: build
	@bash scripts/demo.sh

demo-down:
	bin/eddy-ctl local down --dir .demo

# One node on embedded defaults following the public Jetstream (state in
# .run, kept across runs); says so when the network cannot be reached and
# goes on serving what it has. Ctrl-C stops it.
run: build
	@bash scripts/run.sh

# MinIO is a test service only: built outside the repository into GOPATH/bin,
# reused when present, never linked into Eddy.
minio:
	@bash scripts/install-minio.sh

# toxiproxy (the peers bench's bucket far away), the same way: a test
# service built outside the repository, never linked.
toxiproxy:
	@bash scripts/install-toxiproxy.sh

# The Jetstream v2 server (github.com/bluesky-social/jetstream v0.2.0), which
# the e2e tests run against the simulated network: a test service built from
# tools/jetstream (its own module) into GOPATH/bin, never linked.
jetstream:
	@bash scripts/install-jetstream.sh

# Other tools the tests need, installed if absent: systemd-analyze and
# chromium (apt-get), and e2e/jsclient's npm packages (npm ci from its lock file; Node.js and npm
# must be on the machine).
testdeps:
	@bash scripts/install-test-deps.sh

# vet also builds the Go shuffle that other architectures and -tags purego
# use in place of the SSE2 one (lsm/shuffle_other.go); make test runs its
# tests that way too.
vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (echo "gofmt needed:"; gofmt -l .; exit 1)
	$(GO) vet ./...
	$(GO) vet -tags purego ./lsm/
	GOARCH=arm64 $(GO) vet ./lsm/

test: minio toxiproxy jetstream testdeps vet build
	EDDY_REQUIRE_MINIO=1 EDDY_REQUIRE_PG=1 EDDY_REQUIRE_JETSTREAM=1 EDDY_MINIO_BIN=$(GOBIN)/minio EDDY_JETSTREAM_BIN=$(GOBIN)/jetstream-v0.2.0 $(GO) test -count=1 -timeout 14m ./...
	$(GO) test -count=1 -tags purego -run 'Shuffle|Verify|V1Fixtures|Frame' ./lsm/

# The race detector on the packages whose state goroutines share (the
# engine, the replicated state, the cluster, the write path, the stores and
# the query server). Its own target so make test keeps its time budget;
# .ci/run runs both.
RACE_PKGS := ./lsm/... ./fsm/... ./cluster/... ./ingest/... ./objstore/... ./query/... ./link/... ./internal/... ./cmd/node/...
race: minio
	EDDY_REQUIRE_MINIO=1 EDDY_MINIO_BIN=$(GOBIN)/minio $(GO) test -race -count=1 -timeout 30m $(RACE_PKGS)

# The end-to-end ingest run at the issue's full size: 2,000 accounts and
# about 200,000 records of a simulated network, the leader SIGKILLed three
# times, every target compared on every node.
e2e-full: build
	EDDY_E2E_ACCOUNTS=2000 EDDY_E2E_STEPS=260000 $(GO) test -count=1 -timeout 60m -run TestIngestWithLeaderKills -v ./e2e

# The chaos schedules (e2e/chaos_test.go, docs/reliability.md): 20 seeded
# fault schedules of 8 faults each over a simulated network, in their own
# network namespace (root); make test runs the first two with 3 faults.
# One seed again: make chaos CHAOS_SEEDS=7. Then the bucket down for 70 s
# while the cluster ingests and serves (docs/reliability.md, "The
# outage"); alone: make chaos CHAOS_SEEDS=none; without it: CHAOS_OUTAGE=.
CHAOS_SEEDS ?= 1-20
CHAOS_FAULTS ?= 8
CHAOS_OUTAGE ?= 1
chaos: minio toxiproxy build
	EDDY_REQUIRE_MINIO=1 EDDY_MINIO_BIN=$(GOBIN)/minio EDDY_CHAOS_SEEDS=$(CHAOS_SEEDS) EDDY_CHAOS_FAULTS=$(CHAOS_FAULTS) EDDY_CHAOS_OUTAGE=$(CHAOS_OUTAGE) \
		$(GO) test -count=1 -timeout 120m -run '^TestChaos$$' -v ./e2e

# The Go benchmarks. The storage benchmark is bin/eddy-bench lsm (also run
# as eddy-ctl bench lsm; docs/bench.md).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1 ./...

# Eddy side by side with Pebble (string keys; the expert's binary keys) and
# PostgreSQL (seed 002's schema; an expert's) on one streaming workload at
# each N of PEERS_NS (docs/bench.md, "Peers"): the bench starts and stops
# its own PostgreSQL server (initdb in a temporary directory); one JSON
# report a run in PEERS_DIR, the table on stderr and in the log.
PEERS_NS  ?= 10000000
PEERS_DIR ?= docs/peers
bench-peers: minio toxiproxy
	@mkdir -p bin $(PEERS_DIR)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/eddy-bench ./cmd/bench
	@set -e; for n in $(PEERS_NS); do \
		echo "bench-peers: $$n links (log in $(PEERS_DIR)/peers-$$n.log)"; \
		bin/eddy-bench peers --links $$n --charts $(PEERS_DIR) > $(PEERS_DIR)/peers-$$n.json.tmp 2> $(PEERS_DIR)/peers-$$n.log; \
		mv $(PEERS_DIR)/peers-$$n.json.tmp $(PEERS_DIR)/peers-$$n.json; \
		sed -n '/^| system/,$$p' $(PEERS_DIR)/peers-$$n.log; \
	done

# Per-client limits under a flood (docs/bench.md, "Per-client limits"): a
# query server on CPU 0, normal clients at half its capacity and one
# flooding client on CPU 1; the JSON in docs/bench/clients.json.
.PHONY: bench-clients
bench-clients:
	@mkdir -p bin docs/bench
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/eddy-bench ./cmd/bench
	bin/eddy-bench clients > docs/bench/clients.json.tmp
	mv docs/bench/clients.json.tmp docs/bench/clients.json
	bin/eddy-bench clients --flood-x 10 > docs/bench/clients-10x.json.tmp
	mv docs/bench/clients-10x.json.tmp docs/bench/clients-10x.json

# The storage benchmark at scale (docs/scale.md): bin/eddy-bench lsm
# --shape backfill (streamed: the network's history, then a live tail) at
# each N of SCALE_NS, one JSON result a run in SCALE_DIR, then the scale
# table of every result there (bench-N.json: not the side runs' files, named
# bench-N-WHAT.json) and its charts (SCALE_DIR/*.png). Re-run at
# any subset: make bench-scale SCALE_NS="10000000 100000000".
SCALE_NS  ?= 10000000 100000000 1000000000
SCALE_DIR ?= docs/scale
.PHONY: bench-scale
bench-scale:
	@mkdir -p bin $(SCALE_DIR)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/eddy-bench ./cmd/bench
	@set -e; for n in $(SCALE_NS); do \
		echo "bench-scale: $$n links (log in $(SCALE_DIR)/bench-$$n.log)"; \
		bin/eddy-bench lsm --shape backfill --links $$n --json > $(SCALE_DIR)/bench-$$n.json.tmp 2> $(SCALE_DIR)/bench-$$n.log; \
		mv $(SCALE_DIR)/bench-$$n.json.tmp $(SCALE_DIR)/bench-$$n.json; \
	done
	bin/eddy-bench scale --out $(SCALE_DIR) $$(ls $(SCALE_DIR)/bench-*.json | grep -E '/bench-[0-9]+\.json$$')

FUZZ_TARGETS := \
	./ingest/event:FuzzDecodeJetstream \
	./ingest/event:FuzzDecodeFrame \
	./ingest/event:FuzzReadCAR \
	./ingest/event:FuzzRecordCBOR \
	./extract:FuzzExtract \
	./link:FuzzParseTarget \
	./link:FuzzSyntaxMatchesIndigo \
	./lsm:FuzzDecodeMeta \
	./query:FuzzXRPCParams \
	./ingest:FuzzPLCExport

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$fn ($$pkg) for $(FUZZTIME)"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

clean:
	rm -rf bin
