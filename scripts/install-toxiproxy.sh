#!/usr/bin/env bash
# Installs toxiproxy-server (Shopify/toxiproxy v2.5.0), the TCP proxy the
# peers bench puts between Eddy and MinIO to add network delay (this
# kernel has no netem qdisc). A test service only: built outside the
# repository into $(go env GOPATH)/bin, reused when present, never linked
# into Eddy. Idempotent.
set -euo pipefail
GO=${GO:-go}
TOXIPROXY_MODULE=github.com/Shopify/toxiproxy/v2/cmd/server
TOXIPROXY_VERSION=v2.5.0
bindir=$("$GO" env GOPATH)/bin
bin=$bindir/toxiproxy-server
if [[ -x $bin ]] && version=$("$bin" -version 2>/dev/null | head -n 1) && [[ -n $version ]]; then
	echo "toxiproxy: $bin present ($version)"
	exit 0
fi
echo "toxiproxy: installing $TOXIPROXY_MODULE@$TOXIPROXY_VERSION as $bin"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(
	cd "$tmp"
	GOFLAGS= GOWORK=off GO111MODULE=on GOBIN="$tmp/bin" "$GO" install "$TOXIPROXY_MODULE@$TOXIPROXY_VERSION"
)
mkdir -p "$bindir"
mv "$tmp/bin/server" "$bin"
version=$("$bin" -version 2>/dev/null | head -n 1)
echo "toxiproxy: installed $bin ($version)"
