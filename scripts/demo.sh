#!/usr/bin/env bash
# make demo: a three-node Eddy cluster on loopback (a local directory as the
# object store, every DID outlined: plc off) ingests the bundled capture of
# the live network, then answers a few real questions.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${EDDY_DEMO_DIR:-$(pwd)/.demo}"
CAPTURE="$(pwd)/testdata/jetstream/corpus/expected_v1.jsonl"
# EDDY_BIN: where eddy-ctl and eddy-node are (default: bin/, what make build
# writes); the tests point it at their own build.
BIN="${EDDY_BIN:-bin}"

if [ -f "$DIR/cluster.json" ]; then
  "$BIN/eddy-ctl" local down --dir "$DIR" >/dev/null 2>&1 || true
fi
rm -rf "$DIR"
"$BIN/eddy-ctl" local up --dir "$DIR" --flush-interval 500ms --source "replay+file://$CAPTURE"

HTTP=$(python3 -c 'import json,sys; print(",".join("http://"+n["http"] for n in json.load(open(sys.argv[1]))["nodes"]))' "$DIR/cluster.json" 2>/dev/null \
  || sed -n 's/.*"http": "\(.*\)".*/http:\/\/\1/p' "$DIR/cluster.json" | paste -sd, -)
FIRST=${HTTP%%,*}

echo
echo "waiting for the capture to be published..."
for i in $(seq 1 100); do
  if "$BIN/eddy-ctl" status --addr "$(sed -n 's/.*"admin": "\(.*\)".*/\1/p' "$DIR/cluster.json" | paste -sd, -)" --token-file "$DIR/certs/admin-token" --json 2>/dev/null | grep -q '"eof:'; then
    break
  fi
  sleep 0.2
done

ask() {
  echo
  echo "\$ eddy-ctl query $1"
  "$BIN/eddy-ctl" query "$1" --addr "$HTTP"
}
ask "at://did:plc:r2zybk6op3ymzpz6jhqpkoy5/app.bsky.feed.post/3mpsjbtci2c2o"
ask "https://www.youtube.com/watch?v=V5lDo-jw8mA"
ask "at://did:plc:u4lmvw4wwzaql3z5kcf3r7h4/app.bsky.feed.post/3mptbyospqk2i"
ask "did:plc:mlbpil2fwz43vfn6uuysxtqa"

cat <<MSG

The cluster keeps running (logs in $DIR/n*.log). Ask more:
  $BIN/eddy-ctl query <at-uri | did | https-url> --addr $HTTP
  curl -s '$FIRST/xrpc/blue.cerulea.backlinks.listBacklinks?target=<url-encoded target>'
  curl -s '$FIRST/xrpc/blue.microcosm.links.getBacklinks?subject=<target>&source=app.bsky.feed.like:subject.uri'
  curl -s '$FIRST/links/all?target=<target>'
  $BIN/eddy-ctl status --addr <admin addr> --token-file $DIR/certs/admin-token
Stop it with:
  $BIN/eddy-ctl local down --dir $DIR
MSG
