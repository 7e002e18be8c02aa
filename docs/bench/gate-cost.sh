#!/usr/bin/env bash
# The gate's cost beside nginx: VISITORS admitted visitors at RATE requests
# a second each, for DUR, through nginx proxy_pass and then through GATES
# `stampede serve gate` processes on one private redis-server, to the same
# trivial upstream (an nginx answering 200; /done also says
# "Stampede-Release: done"), and through a bare Go httputil.ReverseProxy
# process (the Go baseline). CPU per proxied request from /proc/PID/stat,
# Redis commands from INFO commandstats, and the release bound across the
# gates: see docs/bench/gatecost (the load client).
#
# usage: gate-cost.sh STAMPEDE_BIN OUT [VISITORS] [RATE] [DUR] [GATES]
set -uo pipefail
BIN=$1 OUT=$2 VISITORS=${3:-1000} RATE=${4:-1} DUR=${5:-20s} GATES=${6:-3}
P_REDIS=18401 P_UP=18410 P_NGINX=18411 P_GO=18412 P_GATE0=18421
SECRET=cost-secret-0123456789abcdef0123456789abcdef ADMIN=cost-admin-token-0123456789
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"/nginx-up "$OUT"/nginx-proxy
OUT=$(cd "$OUT" && pwd)

cat >"$OUT/nginx-up/nginx.conf" <<CONF
worker_processes 1; daemon on; pid $OUT/nginx-up/nginx.pid; error_log $OUT/nginx-up/error.log warn;
events { worker_connections 16384; }
http { access_log off; server { listen 127.0.0.1:$P_UP; keepalive_requests 1000000;
  location /done { add_header Stampede-Release done; return 200 "done\n"; }
  location / { return 200 "ok\n"; } } }
CONF
cat >"$OUT/nginx-proxy/nginx.conf" <<CONF
worker_processes auto; daemon on; pid $OUT/nginx-proxy/nginx.pid; error_log $OUT/nginx-proxy/error.log warn;
events { worker_connections 16384; }
http { access_log off;
  upstream up { server 127.0.0.1:$P_UP; keepalive 256; }
  server { listen 127.0.0.1:$P_NGINX; keepalive_requests 1000000;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
nginx -p "$OUT/nginx-up" -c "$OUT/nginx-up/nginx.conf" -e "$OUT/nginx-up/error.log" || exit 1
nginx -p "$OUT/nginx-proxy" -c "$OUT/nginx-proxy/nginx.conf" -e "$OUT/nginx-proxy/error.log" || exit 1
redis-server --port $P_REDIS --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --pidfile "$OUT/redis.pid" --logfile "$OUT/redis.log"
GPIDS=()
cleanup() {
  for p in "${GPIDS[@]}"; do kill "$p" 2>/dev/null; done
  kill "$(cat "$OUT/nginx-up/nginx.pid")" "$(cat "$OUT/nginx-proxy/nginx.pid")" 2>/dev/null
  redis-cli -p $P_REDIS shutdown nosave >/dev/null 2>&1
}
trap cleanup EXIT
trap "exit 1" INT TERM
sleep 0.5
master=$(cat "$OUT/nginx-proxy/nginx.pid")
NPIDS="$master,$(pgrep -P "$master" | paste -sd,)"
redis-cli -p $P_REDIS flushall >/dev/null

# The Go baseline: a bare httputil.ReverseProxy process.
(cd "$HERE/../.." && go build -o "$OUT/gatecost" ./docs/bench/gatecost) || exit 1
"$OUT/gatecost" -serve-proxy 127.0.0.1:$P_GO -upstream http://127.0.0.1:$P_UP >"$OUT/goproxy.log" 2>&1 &
GPIDS+=($!); GOPID=$!
URLS=()
for i in $(seq 0 $((GATES - 1))); do
  port=$((P_GATE0 + i))
  "$BIN" serve gate --http 127.0.0.1:$port --upstream http://127.0.0.1:$P_UP --room cost --secret $SECRET \
    --admin-token $ADMIN --redis redis://127.0.0.1:$P_REDIS/0 --log-level warn --join-rate 0 --join-prefix-rate 0 >"$OUT/gate-$i.log" 2>&1 &
  GPIDS+=($!)
  URLS+=("http://127.0.0.1:$port")
done
for u in "${URLS[@]}"; do
  for _ in $(seq 1 100); do curl -sf -o /dev/null "$u/.stampede/healthz" && break; sleep 0.1; done
done
GATEPIDS=$(IFS=,; echo "${GPIDS[*]:1}")
"$OUT/gatecost" -gates "$(IFS=,; echo "${URLS[*]}")" -nginx http://127.0.0.1:$P_NGINX -goproxy http://127.0.0.1:$P_GO \
  -gate-pids "$GATEPIDS" -nginx-pids "$NPIDS" -goproxy-pids "$GOPID" -redis 127.0.0.1:$P_REDIS -admin-token $ADMIN \
  -visitors "$VISITORS" -rate "$RATE" -duration "$DUR" | tee -a "$OUT/results.jsonl"
