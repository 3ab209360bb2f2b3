#!/usr/bin/env bash
# make run: one Eddy node on embedded defaults (a local directory as the
# object store, every DID outlined: plc off) following the public
# Jetstream, with failover across its four public instances. It serves
# queries from the start; when the network cannot be reached it says so and
# goes on serving what it has, retrying with backoff.
#
#   EDDY_RUN_DIR        state directory (default .run; kept across runs)
#   EDDY_RUN_JETSTREAM  Jetstream URLs, comma-separated
#   EDDY_RUN_DETACH=1   start, report, and return (the node keeps running;
#                       stop it with: bin/eddy-ctl local down --dir DIR)
#   EDDY_BIN            where eddy-ctl and eddy-node are (default bin)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${EDDY_BIN:-bin}"
DIR="${EDDY_RUN_DIR:-$(pwd)/.run}"
JETSTREAM="${EDDY_RUN_JETSTREAM:-wss://jetstream1.us-east.bsky.network/subscribe,wss://jetstream2.us-east.bsky.network/subscribe,wss://jetstream1.us-west.bsky.network/subscribe,wss://jetstream2.us-west.bsky.network/subscribe}"

if [ -f "$DIR/cluster.json" ]; then
  "$BIN/eddy-ctl" local down --dir "$DIR" >/dev/null 2>&1 || true
fi
mkdir -p "$DIR"
# A restart keeps the node's data (and its Jetstream cursor): local up
# starts over only the processes.
"$BIN/eddy-ctl" local up --dir "$DIR" --nodes 1 --source "jetstream+$JETSTREAM"
HTTP=$(sed -n 's/.*"http": "\(.*\)".*/http:\/\/\1/p' "$DIR/cluster.json" | head -n 1)
LOG=$(sed -n 's/.*"log": "\(.*\)".*/\1/p' "$DIR/cluster.json" | head -n 1)

# Give the first connection a few seconds, then say how it went.
state=connecting
for _ in $(seq 1 50); do
  if grep -q 'cannot reach jetstream' "$LOG" 2>/dev/null; then state=unreachable; break; fi
  if grep -q 'jetstream connected' "$LOG" 2>/dev/null; then state=following; break; fi
  sleep 0.2
done
echo
case $state in
  unreachable)
    echo "The public Jetstream cannot be reached from this machine (see $LOG):"
    grep 'cannot reach jetstream' "$LOG" | tail -n 1
    echo "The node keeps serving what it has at $HTTP and keeps retrying." ;;
  following) echo "Following the public Jetstream; answers at $HTTP." ;;
  *) echo "Connecting to the public Jetstream (progress in $LOG); answers at $HTTP." ;;
esac
cat <<MSG
Ask it:
  $BIN/eddy-ctl query <at-uri | did | https-url> --addr $HTTP
  curl -s '$HTTP/xrpc/blue.microcosm.links.getBacklinksCount?subject=<target>&source=app.bsky.feed.like:subject.uri'
Stop it with: $BIN/eddy-ctl local down --dir $DIR
MSG
if [ "${EDDY_RUN_DETACH:-0}" = 1 ]; then
  exit 0
fi
trap '"$BIN/eddy-ctl" local down --dir "$DIR"' INT TERM
echo "(following the node's log; Ctrl-C stops the node)"
tail -n +1 -f "$LOG" &
wait $!
