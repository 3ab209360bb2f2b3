#!/usr/bin/env bash
# Installs the system tools Eddy's tests use besides MinIO (see
# install-minio.sh): systemd-analyze, which checks the shipped unit
# (deploy/systemd). Idempotent: does nothing when the tools are present.
set -euo pipefail

if command -v systemd-analyze >/dev/null 2>&1; then
	echo "test deps: systemd-analyze present"
	exit 0
fi
echo "test deps: installing systemd (for systemd-analyze)"
SUDO=
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends systemd
command -v systemd-analyze >/dev/null
