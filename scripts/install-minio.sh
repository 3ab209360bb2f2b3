#!/usr/bin/env bash
# Installs the MinIO server used by Eddy's S3 tests into $(go env GOPATH)/bin.
#
# Idempotent: if that binary exists and reports a version, it does nothing.
# MinIO is built with `go install` from outside this repository, so Eddy's
# go.mod never gains MinIO as a dependency and no MinIO code ships in Eddy.
# The build takes a few minutes on two cores.
set -euo pipefail

MINIO_MODULE=github.com/minio/minio
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c

GO=${GO:-go}
gopath=$("$GO" env GOPATH)
bindir=${gopath%%:*}/bin   # go install uses the first GOPATH entry
bin=$bindir/minio

if [[ -x $bin ]] && version=$("$bin" --version 2>/dev/null | head -n 1) && [[ -n $version ]]; then
	echo "minio: $bin present ($version)"
	exit 0
fi

echo "minio: installing $MINIO_MODULE@$MINIO_VERSION into $bindir (takes a few minutes)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Build outside the repository, ignoring any module, workspace or GOFLAGS
# settings of ours; GOBIN pinned so the binary lands where the tests look.
(
	cd "$tmp"
	GOFLAGS= GOWORK=off GO111MODULE=on GOBIN="$bindir" "$GO" install "$MINIO_MODULE@$MINIO_VERSION"
)
if ! version=$("$bin" --version 2>/dev/null | head -n 1) || [[ -z $version ]]; then
	echo "minio: $bin was built but does not report a version" >&2
	exit 1
fi
echo "minio: installed $bin ($version)"
