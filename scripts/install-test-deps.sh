#!/usr/bin/env bash
# Installs what Eddy's tests use besides MinIO (see install-minio.sh):
#   - systemd-analyze, which checks the shipped unit (deploy/systemd), and
#     chromium, the browser e2e/page_test.go drives, through apt-get when
#     missing; so are PostgreSQL (initdb), which the peers bench's test
#     starts, and ip, ss, iptables and unshare, which the chaos schedules
#     use;
#   - the npm packages of e2e/jsclient (the real atproto client and lexicon
#     validator e2e/dropin_test.go drives the cluster with), by `npm ci` from
#     its package-lock.json when node_modules is missing or differs from the
#     lock file. Node.js and npm themselves must be on the machine.
# Idempotent: does nothing when everything is present and current.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: systemd (for systemd-analyze) and chromium (the browser
# e2e/page_test.go drives), each installed only when its command is missing.
missing=()
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
# PostgreSQL (bench/peers_test.go starts a server of its own with initdb).
command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
# ip (iproute2) and unshare (util-linux): the chaos schedules run in their
# own network namespace and cut nodes apart with routing rules.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
# iptables and ss (iproute2): the chaos schedules send every Raft link
# through a toxiproxy proxy of its own (a DNAT rule) to slow it.
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
command -v ss >/dev/null 2>&1 || missing+=(iproute2)
if ((${#missing[@]} == 0)); then
	echo "test deps: systemd-analyze, chromium, PostgreSQL, ip, ss, iptables and unshare present"
else
	echo "test deps: installing ${missing[*]} through apt-get"
	SUDO=
	if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
	$SUDO apt-get update -q
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
	command -v systemd-analyze >/dev/null
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null
	command -v ip >/dev/null && command -v unshare >/dev/null && command -v iptables >/dev/null && command -v ss >/dev/null
fi

for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "test deps: ERROR: $tool is not installed; e2e/jsclient (TestDropIn, TestLexiconsLoad) needs Node.js 20 or later with npm" >&2
		exit 1
	fi
done

js=e2e/jsclient
# node_modules is current when npm's record of what it installed
# (node_modules/.package-lock.json) names every package of the lock file at
# the same version and integrity, and nothing else.
current() {
	[[ -f $js/node_modules/.package-lock.json ]] || return 1
	node -e '
		const fs = require("fs");
		const pkgs = (f) => {
			const p = JSON.parse(fs.readFileSync(f, "utf8")).packages ?? {};
			delete p[""];
			return Object.fromEntries(Object.entries(p).map(([k, v]) => [k, [v.version, v.integrity]]).sort());
		};
		const want = pkgs(process.argv[1]), have = pkgs(process.argv[2]);
		process.exit(JSON.stringify(want) === JSON.stringify(have) ? 0 : 1);
	' "$js/package-lock.json" "$js/node_modules/.package-lock.json"
}

if current; then
	echo "test deps: $js/node_modules matches package-lock.json (node $(node --version), npm $(npm --version))"
else
	echo "test deps: npm ci in $js (node $(node --version), npm $(npm --version))"
	(cd "$js" && npm ci --no-audit --no-fund)
	if ! current; then
		echo "test deps: ERROR: after npm ci, $js/node_modules still differs from package-lock.json" >&2
		exit 1
	fi
fi
