# Shell functions shared by the gate's bench scripts (gate-flood.sh,
# gate-start.sh); sourced, not run.

# wait_gate BASE: waits up to 10 s for the gate at BASE to answer its
# /.stampede/healthz.
wait_gate() {
  for _ in $(seq 1 100); do curl -sf -o /dev/null "$1/.stampede/healthz" && return 0; sleep 0.1; done
  return 1
}

# admitted_visitor BASE ROOM ADMIN ROOM_JSON: configures ROOM on the gate at
# BASE (PUT ROOM_JSON with the admin token), joins as a new visitor and
# polls its ticket until admitted; prints the admission token, or nothing
# when it was not admitted within 10 s.
admitted_visitor() {
  local base=$1 room=$2 admin=$3 cfg=$4 j tok user adm=""
  curl -sf -o /dev/null -X PUT -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
    -d "$cfg" "$base/v1/rooms/$room" || echo "room $room: the configuration failed" >&2
  j=$(curl -s -X POST -H 'Content-Type: application/json' -d '{}' "$base/v1/rooms/$room/tickets")
  tok=$(jq -r .ticket_token <<<"$j"); user=$(jq -r .user_id <<<"$j")
  for _ in $(seq 1 100); do
    adm=$(curl -s -H "Authorization: Bearer $tok" "$base/v1/rooms/$room/tickets/$user" | jq -r '.admission_token // empty')
    [ -n "$adm" ] && break
    sleep 0.1
  done
  printf '%s' "$adm"
}
