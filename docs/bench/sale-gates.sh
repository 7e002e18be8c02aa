#!/bin/bash
# Samples every running `stampede serve gate`'s bound on store calls in
# flight (its /.stampede/metrics, with the admin token read from its
# command line) about every 5 s, with the joins and polls it answered 503,
# until no gate and no `lab sale` runs. Start it beside a sale:
#   stampede lab sale & docs/bench/sale-gates.sh > gates.txt
while sleep 5; do
  pids=$(pgrep -f 'stampede serve gate') || { pgrep -f 'lab sale' >/dev/null || break; continue; }
  for p in $pids; do
    cl=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null) || continue
    addr=$(echo "$cl" | grep -o -- '--http [^ ]*' | cut -d' ' -f2)
    tok=$(echo "$cl" | grep -o -- '--admin-token [^ ]*' | cut -d' ' -f2)
    inst=$(echo "$cl" | grep -o -- '--instance [^ ]*' | cut -d' ' -f2)
    m=$(curl -s -m 3 -H "Authorization: Bearer $tok" http://$addr/.stampede/metrics)
    echo "$(date +%T) $inst $(echo "$m" | grep -E '^stampede_waitroom_store_(inflight|inflight_limit|refused_total) ' | awk '{printf "%s=%s ", $1, $2}' | sed 's/stampede_waitroom_store_//g') j503=$(echo "$m" | grep 'code="503",method="POST",route="/v1/rooms/{room}/tickets"' | awk '{print $2}') p503=$(echo "$m" | grep 'code="503",method="GET",route="/v1/rooms/{room}/tickets/{user}"' | awk '{print $2}')"
  done
done
