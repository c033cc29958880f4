#!/usr/bin/env bash
# Scale-out on loopback: two `kvshare serve` replicas behind nginx
# (server/nginx/kvshare.conf, its addresses rewritten to free 127.0.0.1 ports),
# a mixed load through nginx (scripts/serve_loopback_load.py: completions,
# SSE streams, long prompts, models / health / tokenize, a bad request), then
# replica 1 gets SIGTERM while requests keep coming: nginx moves them to
# replica 2, none fails, and the drained replica exits 0. Everything stops and
# is removed at the end (trap); nothing leaves 127.0.0.1.
#
# Usage: scripts/serve_loopback.sh [--requests N] [--clients C] [--model PATH]
# Env:   KVSHARE_CLI (default build/bin/kvshare), KVSHARE_PYTHON (default python3)
# Exit:  0 when every check passes, 1 when one fails, 77 when nginx, the
#        binary or the model is missing (ctest counts that as skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

requests=28 clients=6 model=${KVSHARE_MODEL:-$(python3 "$root/scripts/fetch_model.py" --print-path)}
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) requests=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "usage: scripts/serve_loopback.sh [--requests N] [--clients C] [--model PATH]" >&2; exit 2 ;;
  esac
done
cli=${KVSHARE_CLI:-$root/build/bin/kvshare}
python=${KVSHARE_PYTHON:-python3}
nginx_bin=$(command -v nginx || true)
[ -n "$nginx_bin" ] || nginx_bin=/usr/sbin/nginx
[ -x "$nginx_bin" ] || { echo "serve_loopback: no nginx (Debian package nginx): skipped" >&2; exit 77; }
[ -x "$cli" ] || { echo "serve_loopback: no kvshare binary at $cli: skipped" >&2; exit 77; }
[ -f "$model" ] || { echo "serve_loopback: no model at $model: skipped" >&2; exit 77; }
load="$python $root/scripts/serve_loopback_load.py"

work=$(mktemp -d /tmp/kvshare-loopback.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Starts a replica on a free port; sets $port.
start_replica() {
  local log=$work/replica$1.log
  # The log exists before the replica does: the shell creates its redirection
  # only once the background job runs, and a sed on a missing file fails the
  # script (set -e, pipefail).
  : >"$log"
  "$cli" serve --model "$model" --host 127.0.0.1 --port 0 --slots 4 --max-context 2048 --drain-timeout 20 \
    2>"$log" &
  pids+=($!)
  eval "replica$1_pid=$!"
  for _ in $(seq 200); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && return 0
    sleep 0.05
  done
  echo "serve_loopback: replica $1 did not start:" >&2; cat "$log" >&2; exit 1
}
start_replica 1; port1=$port
start_replica 2; port2=$port
$load wait-health "$port1" "$port2"

lb=$($python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$port1/" -e "s/127\.0\.0\.1:8082/127.0.0.1:$port2/" \
    -e "s/127\.0\.0\.1:8080/127.0.0.1:$lb/" server/nginx/kvshare.conf >"$work/kvshare.conf"
mkdir -p "$work/tmp"
{
  [ "$(id -u)" = 0 ] && echo "user root;"  # workers need the temp folders below
  cat <<EOF
worker_processes 1;
daemon off;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 512; }
http {
  access_log $work/access.log;
  client_body_temp_path $work/tmp/body;
  proxy_temp_path $work/tmp/proxy;
  fastcgi_temp_path $work/tmp/fastcgi;
  uwsgi_temp_path $work/tmp/uwsgi;
  scgi_temp_path $work/tmp/scgi;
  include $work/kvshare.conf;
}
EOF
} >"$work/nginx.conf"
"$nginx_bin" -t -q -p "$work" -c "$work/nginx.conf"
"$nginx_bin" -p "$work" -c "$work/nginx.conf" &
pids+=($!)
$load wait-health "$lb"
echo "nginx on 127.0.0.1:$lb -> replicas 127.0.0.1:$port1, 127.0.0.1:$port2"

$load mixed --lb "$lb" --replicas "$port1,$port2" --requests "$requests" --clients "$clients"

# Rolling restart, first half: replica 1 drains while requests keep coming.
$load failover --lb "$lb" --requests 8 &
load_pid=$!
sleep 0.3
kill -TERM "$replica1_pid"
wait "$load_pid"
rc=0
wait "$replica1_pid" || rc=$?
[ "$rc" = 0 ] || { echo "serve_loopback: replica 1 exited with $rc after SIGTERM" >&2; cat "$work/replica1.log" >&2; exit 1; }
grep -q "SIGTERM: draining" "$work/replica1.log"
echo "replica 1 drained and exited 0"
echo "serve_loopback: OK"
