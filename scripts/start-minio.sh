#!/usr/bin/env bash
# Runs a local MinIO server for trying Eddy against S3 by hand.
# (Go tests need none of this: they start their own server, see
# objstore/miniotest.)
#
#   scripts/start-minio.sh [start]   start in the background, wait until live,
#                                    create the bucket, print the store URL
#   scripts/start-minio.sh stop      stop the server started here
#   scripts/start-minio.sh status    say whether it runs
#
# Settings (environment):
#   MINIO_DIR          data, log and pid directory  (default: ${TMPDIR:-/tmp}/eddy-minio)
#   MINIO_PORT         S3 API port on 127.0.0.1     (default: 9000)
#   MINIO_CONSOLE_PORT console port on 127.0.0.1    (default: 9001)
#   EDDY_S3_BUCKET     bucket to create             (default: eddy)
#   EDDY_S3_ACCESS_KEY / EDDY_S3_SECRET_KEY
#                      root credentials             (default: eddydev / eddydev-secret)
#   EDDY_MINIO_BIN     the minio binary (default: $(go env GOPATH)/bin/minio,
#                      else minio in PATH; `make minio` installs it)
set -euo pipefail

cmd=${1:-start}
dir=${MINIO_DIR:-${TMPDIR:-/tmp}/eddy-minio}
port=${MINIO_PORT:-9000}
console_port=${MINIO_CONSOLE_PORT:-9001}
bucket=${EDDY_S3_BUCKET:-eddy}
access_key=${EDDY_S3_ACCESS_KEY:-eddydev}
secret_key=${EDDY_S3_SECRET_KEY:-eddydev-secret}
pidfile=$dir/minio.pid
logfile=$dir/minio.log
endpoint=127.0.0.1:$port

find_minio() {
	if [[ -n ${EDDY_MINIO_BIN:-} ]]; then
		echo "$EDDY_MINIO_BIN"
		return
	fi
	local gopath
	if gopath=$(go env GOPATH 2>/dev/null) && [[ -x ${gopath%%:*}/bin/minio ]]; then
		echo "${gopath%%:*}/bin/minio"
		return
	fi
	command -v minio || true
}

running() {
	[[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

case $cmd in
start)
	if running; then
		echo "minio: already running (pid $(cat "$pidfile")) at http://$endpoint"
		exit 0
	fi
	bin=$(find_minio)
	if [[ -z $bin || ! -x $bin ]]; then
		echo "minio: no MinIO binary found; run \`make minio\`" >&2
		exit 1
	fi
	if [[ ${#secret_key} -lt 8 ]]; then
		echo "minio: the secret key must be at least 8 characters" >&2
		exit 1
	fi
	mkdir -p "$dir/data" "$dir/certs"
	MINIO_ROOT_USER=$access_key MINIO_ROOT_PASSWORD=$secret_key \
		MINIO_BROWSER=off MINIO_UPDATE=off \
		nohup "$bin" server --quiet \
		--address "$endpoint" --console-address "127.0.0.1:$console_port" \
		--certs-dir "$dir/certs" "$dir/data" >"$logfile" 2>&1 &
	echo $! >"$pidfile"
	for _ in $(seq 1 300); do
		if curl -fsS -o /dev/null "http://$endpoint/minio/health/live" 2>/dev/null; then
			break
		fi
		if ! running; then
			echo "minio: exited during startup; log:" >&2
			tail -n 30 "$logfile" >&2
			rm -f "$pidfile"
			exit 1
		fi
		sleep 0.1
	done
	if ! curl -fsS -o /dev/null "http://$endpoint/minio/health/live"; then
		echo "minio: not live after 30s; see $logfile" >&2
		exit 1
	fi
	# Create the bucket (a signed PUT /bucket); 409 means it exists.
	code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT \
		--aws-sigv4 "aws:amz:us-east-1:s3" --user "$access_key:$secret_key" \
		"http://$endpoint/$bucket")
	case $code in
	200 | 409) ;;
	*)
		echo "minio: creating bucket $bucket failed (HTTP $code)" >&2
		exit 1
		;;
	esac
	echo "minio: running (pid $(cat "$pidfile")) at http://$endpoint, data in $dir/data"
	echo "Use it with:"
	echo "  export EDDY_S3_ACCESS_KEY=$access_key EDDY_S3_SECRET_KEY=<the secret key>"
	echo "  store URL: s3://$bucket/?endpoint=$endpoint&region=us-east-1&insecure=true"
	;;
stop)
	if running; then
		pid=$(cat "$pidfile")
		kill "$pid"
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid"
		fi
		echo "minio: stopped"
	else
		echo "minio: not running"
	fi
	rm -f "$pidfile"
	;;
status)
	if running; then
		echo "minio: running (pid $(cat "$pidfile")) at http://$endpoint"
	else
		echo "minio: not running"
		exit 1
	fi
	;;
*)
	echo "usage: $0 [start|stop|status]" >&2
	exit 2
	;;
esac
