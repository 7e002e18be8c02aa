#!/usr/bin/env bash
# The cold start: N short floods (one admitted visitor, RATE req/s for DUR,
# default 3,000 for 2.4 s) each on a proxy started for it, to a trivial
# upstream (an nginx answering 200). MODE is what is flooded:
#   gate     `stampede serve gate` on the embedded store (BIN: the stampede
#            binary), flooded as soon as its visitor is admitted;
#   goproxy  a bare Go httputil.ReverseProxy with the gate's transport
#            settings (docs/bench/gatecost -serve-proxy; BIN is ignored);
#   nginx    nginx proxy_pass (BIN is ignored).
# Each run prints one JSON line: p50, p99 and max latency, the mean
# latency of the requests sent in the first 200 ms, and the connections to
# the upstream open at the end (each one was dialled by the proxy); all go
# to OUT/results.jsonl too.
#
# usage: gate-start.sh MODE BIN OUT [N] [DUR] [RATE]
# (ports P_UP, P_PROXY in the environment, default 19301 and 19303)
set -uo pipefail
MODE=$1 BIN=$2 OUT=$3 N=${4:-10} DUR=${5:-2400ms} RATE=${6:-3000}
VEGETA=${VEGETA:-$HOME/go/bin/vegeta}
P_UP=${P_UP:-19301} P_PROXY=${P_PROXY:-19303}
SECRET=start-secret-0123456789abcdef0123456789abcdef ADMIN=start-admin-token-0123456789
. "$(dirname "$0")/gate-lib.sh"
case $MODE in gate | goproxy | nginx) ;; *) echo "MODE must be gate, goproxy or nginx" >&2; exit 2 ;; esac
mkdir -p "$OUT"/up "$OUT"/proxy
OUT=$(cd "$OUT" && pwd)
cat >"$OUT/up/nginx.conf" <<C
worker_processes 1; daemon on; pid $OUT/up/nginx.pid; error_log $OUT/up/error.log warn;
events { worker_connections 16384; }
http { access_log off; server { listen 127.0.0.1:$P_UP; keepalive_requests 1000000; location / { return 200 "ok\n"; } } }
C
cat >"$OUT/proxy/nginx.conf" <<C
worker_processes auto; daemon on; pid $OUT/proxy/nginx.pid; error_log $OUT/proxy/error.log warn;
events { worker_connections 16384; }
http { access_log off;
  upstream up { server 127.0.0.1:$P_UP; keepalive 256; }
  server { listen 127.0.0.1:$P_PROXY; keepalive_requests 1000000;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
C
nginx -p "$OUT/up" -c "$OUT/up/nginx.conf" -e "$OUT/up/error.log" || exit 1
PROXY=""
stop_proxy() {
  [ -z "$PROXY" ] && return
  kill "$PROXY" 2>/dev/null
  [ "$MODE" != nginx ] && wait "$PROXY" 2>/dev/null
  PROXY=""
}
trap 'stop_proxy; kill "$(cat "$OUT/up/nginx.pid")" 2>/dev/null' EXIT
trap "exit 1" INT TERM
if [ "$MODE" = goproxy ]; then
  (cd "$(dirname "$0")/../.." && go build -o "$OUT/gatecost" ./docs/bench/gatecost) || exit 1
fi

for i in $(seq 1 "$N"); do
  cookie=()
  case $MODE in
  gate)
    rm -rf "$OUT/data$i"; mkdir -p "$OUT/data$i"
    "$BIN" serve gate --http 127.0.0.1:$P_PROXY --upstream http://127.0.0.1:$P_UP --room start --secret $SECRET \
      --admin-token $ADMIN --visitor-rate 0 --log-level warn --data-dir "$OUT/data$i" >"$OUT/gate$i.log" 2>&1 &
    PROXY=$!
    wait_gate "http://127.0.0.1:$P_PROXY"
    adm=$(admitted_visitor "http://127.0.0.1:$P_PROXY" start "$ADMIN" '{"capacity":10,"lease_seconds":600,"admit_interval_ms":200}')
    [ -z "$adm" ] && { echo "run $i: the visitor was not admitted" >&2; stop_proxy; continue; }
    cookie=(-header "Cookie: stampede_admission=$adm") ;;
  goproxy)
    "$OUT/gatecost" -serve-proxy 127.0.0.1:$P_PROXY -upstream http://127.0.0.1:$P_UP >"$OUT/goproxy$i.log" 2>&1 &
    PROXY=$!
    for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$P_PROXY/" && break; sleep 0.1; done ;;
  nginx)
    nginx -p "$OUT/proxy" -c "$OUT/proxy/nginx.conf" -e "$OUT/proxy/error.log" || exit 1
    sleep 0.2; PROXY=$(cat "$OUT/proxy/nginx.pid")
    for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$P_PROXY/" && break; sleep 0.1; done ;;
  esac
  "$VEGETA" attack -rate "$RATE/s" -duration "$DUR" -timeout 10s "${cookie[@]}" >"$OUT/$MODE$i.bin" <<<"GET http://127.0.0.1:$P_PROXY/checkout"
  conns=$(ss -tn state established "( dport = :$P_UP )" | tail -n +2 | wc -l)
  first=$("$VEGETA" encode --to csv <"$OUT/$MODE$i.bin" | sort -t, -k1,1n |
    awk -F, 'NR == 1 {s = $1} $1 - s < 2e8 {n++; l += $3} END {printf "%.3f", l / n / 1e6}')
  "$VEGETA" report -type json <"$OUT/$MODE$i.bin" | jq -c --arg mode "$MODE" --argjson run "$i" --argjson conns "$conns" --argjson first "$first" \
    '{mode: $mode, run: $run, requests: .requests, codes: .status_codes, p50_ms: (.latencies."50th" / 1e6),
      p99_ms: (.latencies."99th" / 1e6), max_ms: (.latencies.max / 1e6), first_200ms_mean_ms: $first, upstream_conns: $conns}' |
    tee -a "$OUT/results.jsonl"
  stop_proxy
  sleep 0.3
done
