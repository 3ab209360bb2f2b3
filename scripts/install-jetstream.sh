#!/usr/bin/env bash
# Installs the Jetstream v2 server (github.com/bluesky-social/jetstream
# v0.2.0, cmd/jetstream), which the end-to-end tests run against the
# simulated network (e2e/jetstream2_test.go). A test service only: built
# from tools/jetstream (a module of its own, pinned by its go.mod and
# go.sum, so the server's dependencies stay out of Eddy's module) into
# $(go env GOPATH)/bin/jetstream-v0.2.0, reused when present, never linked
# into Eddy. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
JETSTREAM_VERSION=v0.2.0
bindir=$("$GO" env GOPATH)/bin
bin=$bindir/jetstream-$JETSTREAM_VERSION
if [[ -x $bin ]] && "$bin" --help >/dev/null 2>&1; then
	echo "jetstream: $bin present"
	exit 0
fi
echo "jetstream: building github.com/bluesky-social/jetstream/cmd/jetstream@$JETSTREAM_VERSION as $bin"
mkdir -p "$bindir"
(
	cd tools/jetstream
	GOFLAGS=-mod=readonly GOWORK=off "$GO" build -o "$bin.tmp" github.com/bluesky-social/jetstream/cmd/jetstream
)
mv "$bin.tmp" "$bin"
echo "jetstream: installed $bin"
