#!/usr/bin/env bash
# The gate flood: one admitted visitor at RATE req/s for DUR through a freshly
# started `stampede serve gate` (--visitor-rate 0), on the embedded store and
# on a private redis-server, and nginx proxy_pass to the same trivial upstream
# (an nginx answering 200), REPS times. While the gate is flooded, 3 other
# buyers join 5 s in and wait for their admission.
#
# usage: gate-flood.sh STAMPEDE_BIN OUT [REPS] [DUR] [RATE]
# (ports: P_UP, P_NGINX, P_GATE, P_REDIS in the environment, default 19201-19204;
# STORES="embedded redis" the gate's stores, in that order, and "goproxy" for
# a bare Go httputil.ReverseProxy process (docs/bench/gatecost -serve-proxy,
# port P_GO, default 19205) flooded the same way; GATE_GOGC, when
# set, is the gate process's GOGC, GATE_GOMAXPROCS its GOMAXPROCS. Each gate
# run also records the gate's garbage collections during the flood: cycles
# and pause seconds, from its /.stampede/metrics. Every run records the
# proxy's run-queue wait: the time its threads were ready to run but waited
# for a CPU, from /proc/PID/task/*/schedstat.)
set -uo pipefail
BIN=$1 OUT=$2 REPS=${3:-5} DUR=${4:-60s} RATE=${5:-3000}
STORES=${STORES:-embedded redis} GATE_GOGC=${GATE_GOGC:-} GATE_GOMAXPROCS=${GATE_GOMAXPROCS:-}
VEGETA=${VEGETA:-$HOME/go/bin/vegeta}
P_UP=${P_UP:-19201} P_NGINX=${P_NGINX:-19202} P_GATE=${P_GATE:-19203} P_REDIS=${P_REDIS:-19204} P_GO=${P_GO:-19205}
SECRET=flood-secret-0123456789abcdef0123456789abcdef ADMIN=flood-admin-token-0123456789
. "$(dirname "$0")/gate-lib.sh"
mkdir -p "$OUT"/nginx-up "$OUT"/nginx-proxy
OUT=$(cd "$OUT" && pwd)

ticks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }   # utime+stime, clock ticks
# runq PID...: nanoseconds the processes' threads have waited on a run queue.
runq() { local p; for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done | awk '{s+=$2} END {printf "%d", s}'; }
load() { cut -d' ' -f1 /proc/loadavg; }
# gc: the gate's garbage collections so far, "cycles pause_seconds".
gc() { curl -s -H "Authorization: Bearer $ADMIN" "http://127.0.0.1:$P_GATE/.stampede/metrics" |
  awk '/^go_gc_duration_seconds_count/ {c=$2} /^go_gc_duration_seconds_sum/ {s=$2} END {print c+0, s+0}'; }

# The trivial upstream and the nginx proxy in front of it.
cat >"$OUT/nginx-up/nginx.conf" <<EOF
worker_processes 1; daemon on; pid $OUT/nginx-up/nginx.pid; error_log $OUT/nginx-up/error.log warn;
events { worker_connections 16384; }
http { access_log off; server { listen 127.0.0.1:$P_UP; keepalive_requests 1000000; location / { return 200 "ok\n"; } } }
EOF
cat >"$OUT/nginx-proxy/nginx.conf" <<EOF
worker_processes auto; daemon on; pid $OUT/nginx-proxy/nginx.pid; error_log $OUT/nginx-proxy/error.log warn;
events { worker_connections 16384; }
http { access_log off;
  upstream up { server 127.0.0.1:$P_UP; keepalive 256; }
  server { listen 127.0.0.1:$P_NGINX; keepalive_requests 1000000;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
EOF
nginx -p "$OUT/nginx-up" -c "$OUT/nginx-up/nginx.conf" -e "$OUT/nginx-up/error.log" || exit 1
nginx -p "$OUT/nginx-proxy" -c "$OUT/nginx-proxy/nginx.conf" -e "$OUT/nginx-proxy/error.log" || exit 1
sleep 0.5
master=$(cat "$OUT/nginx-proxy/nginx.pid"); echo "$master $(pgrep -P "$master" | tr '\n' ' ')" >"$OUT/nginx-proxy/pids"
redis-server --port $P_REDIS --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --pidfile "$OUT/redis.pid" --logfile "$OUT/redis.log"
sleep 0.5
cleanup() {
  [ -n "${GATE:-}" ] && kill "$GATE" 2>/dev/null
  kill "$(cat "$OUT/nginx-up/nginx.pid")" "$(cat "$OUT/nginx-proxy/nginx.pid")" 2>/dev/null
  redis-cli -p $P_REDIS shutdown nosave >/dev/null 2>&1
}
trap cleanup EXIT
trap "exit 1" INT TERM

# attack NAME URL [COOKIE]: vegeta for DUR at RATE; prints the report's JSON.
attack() {
  local hdr=()
  [ -n "${3:-}" ] && hdr=(-header "Cookie: stampede_admission=$3")
  echo "GET $2" | "$VEGETA" attack -rate "$RATE/s" -duration "$DUR" -timeout 10s "${hdr[@]}" >"$OUT/$1.bin"
  "$VEGETA" report -type json <"$OUT/$1.bin"
}

# buyer N: joins, then polls every 250 ms until admitted; prints the seconds it took.
buyer() {
  local t0 j tok user st
  t0=$(date +%s.%N)
  j=$(curl -s -m 10 -X POST -H 'Content-Type: application/json' -d '{}' "http://127.0.0.1:$P_GATE/v1/rooms/flood/tickets")
  tok=$(jq -r .ticket_token <<<"$j"); user=$(jq -r .user_id <<<"$j")
  for _ in $(seq 1 240); do
    st=$(curl -s -m 10 -H "Authorization: Bearer $tok" "http://127.0.0.1:$P_GATE/v1/rooms/flood/tickets/$user" | jq -r .state)
    if [ "$st" = admitted ]; then echo "$(date +%s.%N) - $t0" | bc; return; fi
    sleep 0.25
  done
  echo "never"
}

gate_run() { # gate_run LABEL [redis-url]
  local label=$1 redis=${2:-} args=() adm l0 c0 c1 q0 q1 cmds1 base rep
  if [ -n "$redis" ]; then redis-cli -p $P_REDIS flushall >/dev/null; args=(--redis "$redis"); else args=(--data-dir "$OUT/$label-data"); mkdir -p "$OUT/$label-data"; fi
  env ${GATE_GOGC:+GOGC=$GATE_GOGC} ${GATE_GOMAXPROCS:+GOMAXPROCS=$GATE_GOMAXPROCS} "$BIN" serve gate --http 127.0.0.1:$P_GATE --upstream http://127.0.0.1:$P_UP --room flood --secret $SECRET \
    --admin-token $ADMIN --visitor-rate 0 --log-level warn "${args[@]}" >"$OUT/$label.log" 2>&1 &
  GATE=$!
  wait_gate "http://127.0.0.1:$P_GATE"
  adm=$(admitted_visitor "http://127.0.0.1:$P_GATE" flood "$ADMIN" \
    '{"capacity":10,"lease_seconds":600,"admit_interval_ms":200,"max_admissions_per_minute":0,"opens_at":null,"paused":false,"closed":false,"closed_message":"","abandon_after_seconds":60,"arrival_seconds":60,"retention_seconds":3600,"pow_difficulty":0,"template":null}')
  [ -z "$adm" ] && echo "$label: the flooding visitor was not admitted" >&2
  base=null
  if [ -n "$redis" ]; then # the room's own commands with the visitor admitted and no traffic, over 10 s
    redis-cli -p $P_REDIS config resetstat >/dev/null; sleep 10
    base=$(redis-cli -p $P_REDIS info commandstats | awk -F'[=,]' '/^cmdstat_/ && !/cmdstat_info/ && !/cmdstat_config/ {s+=$2} END {print s}')
    redis-cli -p $P_REDIS config resetstat >/dev/null
  fi
  l0=$(load); c0=$(ticks $GATE); read -r gc0 gp0 <<<"$(gc)"; q0=$(runq $GATE)
  ( sleep 5; for b in 1 2 3; do buyer $b >"$OUT/$label.buyer$b" & done; wait ) &
  local bpid=$!
  rep=$(attack "$label" "http://127.0.0.1:$P_GATE/checkout" "$adm")
  c1=$(ticks $GATE); read -r gc1 gp1 <<<"$(gc)"; q1=$(runq $GATE)
  wait $bpid
  cmds1=null
  [ -n "$redis" ] && { redis-cli -p $P_REDIS info commandstats >"$OUT/$label.commandstats"
    cmds1=$(awk -F'[=,]' '/^cmdstat_/ && !/cmdstat_info/ && !/cmdstat_config/ {s+=$2} END {print s}' "$OUT/$label.commandstats"); }
  kill $GATE; wait $GATE 2>/dev/null; GATE=""
  jq -c --arg name "$label" --arg l0 "$l0" --arg l1 "$(load)" --argjson cpu $((c1 - c0)) --argjson cmds "$cmds1" --argjson base "$base" \
    --arg gogc "${GATE_GOGC:-default}" --arg procs "${GATE_GOMAXPROCS:-default}" --argjson runq $((q1 - q0)) --argjson gcs "$(awk -v a="$gc1" -v b="$gc0" 'BEGIN {print a - b}')" --argjson gcpause "$(awk -v a="$gp1" -v b="$gp0" 'BEGIN {printf "%.6f", a - b}')" \
    --arg b "$(cat "$OUT/$label.buyer1" "$OUT/$label.buyer2" "$OUT/$label.buyer3" | tr '\n' ' ')" \
    '{"label": $name, requests: .requests, codes: .status_codes, errors: (.errors | length), error_kinds: (.errors[:3]),
      p50_ms: (.latencies."50th" / 1e6), p99_ms: (.latencies."99th" / 1e6), success: .success,
      cpu_ms_per_req: ($cpu * 10 / ((.status_codes."200" // 0) + 0.0001)), redis_cmds: $cmds,
      redis_cmds_per_req: (if $cmds == null then null else $cmds / ((.status_codes."200" // 0) + 0.0001) end),
      redis_idle_cmds_per_10s: $base,
      gogc: $gogc, gomaxprocs: $procs, gc_cycles: $gcs, gc_pause_s: $gcpause,
      runq_wait_ms: ($runq / 1e6), runq_wait_us_per_req: ($runq / 1e3 / ((.status_codes."200" // 0) + 0.0001)),
      load_before: $l0, load_after: $l1, other_buyers_admitted_s: $b}' <<<"$rep" | tee -a "$OUT/results.jsonl"
}

# proxy_run LABEL URL PIDS...: floods URL, with the CPU and run-queue wait
# of the processes PIDS (a proxy's), and prints the run's figures.
proxy_run() {
  local label=$1 url=$2 l0 c0=0 c1=0 q0 q1 rep p
  shift 2
  l0=$(load); for p in "$@"; do c0=$((c0 + $(ticks "$p"))); done; q0=$(runq "$@")
  rep=$(attack "$label" "$url")
  for p in "$@"; do c1=$((c1 + $(ticks "$p"))); done; q1=$(runq "$@")
  jq -c --arg name "$label" --arg l0 "$l0" --arg l1 "$(load)" --argjson cpu $((c1 - c0)) --argjson runq $((q1 - q0)) \
    '{"label": $name, requests: .requests, codes: .status_codes, errors: (.errors | length), error_kinds: (.errors[:3]),
      p50_ms: (.latencies."50th" / 1e6), p99_ms: (.latencies."99th" / 1e6), success: .success,
      cpu_ms_per_req: ($cpu * 10 / ((.status_codes."200" // 0) + 0.0001)),
      runq_wait_ms: ($runq / 1e6), runq_wait_us_per_req: ($runq / 1e3 / ((.status_codes."200" // 0) + 0.0001)),
      load_before: $l0, load_after: $l1}' <<<"$rep" | tee -a "$OUT/results.jsonl"
}

# nginx_run LABEL: nginx proxy_pass (its master and workers).
nginx_run() { proxy_run "$1" "http://127.0.0.1:$P_NGINX/checkout" $(cat "$OUT/nginx-proxy/pids"); }

# goproxy_run LABEL: the bare Go reverse proxy, started for the run.
goproxy_run() {
  local pid
  "$OUT/gatecost" -serve-proxy 127.0.0.1:$P_GO -upstream http://127.0.0.1:$P_UP >"$OUT/$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$P_GO/" && break; sleep 0.1; done
  proxy_run "$1" "http://127.0.0.1:$P_GO/checkout" $pid
  kill $pid; wait $pid 2>/dev/null
}
case " $STORES " in *" goproxy "*)
  (cd "$(dirname "$0")/../.." && go build -o "$OUT/gatecost" ./docs/bench/gatecost) || exit 1 ;;
esac

for i in $(seq 1 "$REPS"); do
  nginx_run "nginx-$i"
  for st in $STORES; do
    case $st in
    embedded) gate_run "gate-embedded-$i" ;;
    redis) gate_run "gate-redis-$i" "redis://127.0.0.1:$P_REDIS/0" ;;
    goproxy) goproxy_run "goproxy-$i" ;;
    *) echo "unknown store $st" >&2; exit 2 ;;
    esac
  done
done
