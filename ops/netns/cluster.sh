#!/usr/bin/env bash
# Several ringserve hosts on one machine: N node network namespaces and one balancer namespace,
# joined by veth links to a bridge in the balancer's namespace, a ringserve in each node and HAProxy
# (ops/lb/haproxy.cfg) in front. Root only (ip netns). Every address lives inside the namespaces
# made here (one private 10.x.y.0/24 per run); nothing is added to the host's own namespace, and
# the names carry a random run id, so two runs coexist.
#
#   cluster.sh up DIR           build, start, write DIR/state.json; tears down what it made on failure
#   cluster.sh down DIR         stop every process in the namespaces, delete them, unlink the regions
#   cluster.sh kill-node DIR I  SIGKILL every process of node I (the whole host dies at once)
#   cluster.sh start-node DIR I start node I's ringserve again (same namespace and address)
#   cluster.sh stop-node DIR I  SIGSTOP every process of node I;  cont-node DIR I: SIGCONT
#   cluster.sh drain-node DIR I SIGTERM node I's supervisor: it drains (/health 503) and exits
#
# Environment: RS_NODES (3), RS_API_KEY (random), RS_SERVE_ARGS (the ringserve flags besides
# --host, --port and --api-key). The load comes from inside the balancer's namespace
# (`ip netns exec <lb ns> ...`, state.json has the names); HAProxy's admin socket is a file in DIR,
# reachable from anywhere.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NODE_PORT=8000
LB_PORT=8000
PROM_PORT=8405
READY_TIMEOUT_S=60
# The tiny model at a quarter of its modelled speed: a 128-token answer takes about half a second,
# long enough to be in flight when a node dies, and the engines sleep their step times instead of
# spinning a core each (--max-speed would), so three nodes fit on a small machine.
DEFAULT_SERVE_ARGS="--model tiny --speedup 0.25 --packer-threads 1 --log-level warn"

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

need_tools() {
  [ "$(id -u)" = 0 ] || die "needs root (ip netns)"
  command -v ip >/dev/null || die "needs iproute2 (ip)"
  command -v haproxy >/dev/null || die "needs haproxy"
  [ -f "$ROOT/dist/src/cli.js" ] || die "run 'npm run build' first ($ROOT/dist/src/cli.js missing)"
}

load_env() {
  DIR=$1
  [ -f "$DIR/env" ] || die "$DIR/env missing: not a cluster directory"
  # shellcheck disable=SC1091
  . "$DIR/env"
}

node_ns() { echo "rs-${RUN_ID}-n$1"; }
node_addr() { echo "${SUBNET}.$((11 + $1))"; }

# start_node I: ringserve in node I's namespace, in the background; its pid (the supervisor, whose
# shared region is /dev/shm/ringserve-<pid>-*) is appended to DIR/primaries.
start_node() {
  local i=$1 ns addr log
  ns=$(node_ns "$i")
  addr=$(node_addr "$i")
  log="$DIR/node$i.log"
  echo "== start $(date -u +%FT%TZ)" >>"$log"
  # `ip netns exec` execs the command: $! is ringserve's supervisor.
  # shellcheck disable=SC2086
  ip netns exec "$ns" node "$ROOT/dist/src/cli.js" serve --host "$addr" --port "$NODE_PORT" \
    --api-key "$API_KEY" $SERVE_ARGS >>"$log" 2>&1 </dev/null &
  echo "$!" >>"$DIR/primaries"
  echo "$!" >"$DIR/node$i.pid"
}

wait_ready() {
  local i=$1 pid deadline=$((SECONDS + READY_TIMEOUT_S))
  pid=$(cat "$DIR/node$i.pid")
  # Ready once the log has said "serving" since this start's "== start" marker.
  until awk '/^== start/ { ok = 0 } /serving .* on http:/ { ok = 1 } END { exit !ok }' "$DIR/node$i.log"; do
    alive "$pid" || die "node $i exited while starting: $(tail -5 "$DIR/node$i.log")"
    [ "$SECONDS" -lt "$deadline" ] || die "node $i not serving after ${READY_TIMEOUT_S}s"
    sleep 0.1
  done
}

# signal_ns NS SIG: sends SIG to every process in NS.
signal_ns() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null || true)
  # shellcheck disable=SC2086 # one pid per word
  [ -z "$pids" ] || kill "-$2" $pids 2>/dev/null || true
}

# wait_empty NS SECONDS: until no process is left in NS and nothing in it listens on the node
# port; returns 1 on timeout. Both, because `ip netns pids` stops listing a killed process once its
# main thread has left the namespace, but its sockets close with its last thread, and one of an API
# server's threads may still be unmapping its regions: the kernel completes connections to the
# listener meanwhile, and resets them when it closes, after the client has sent its request
# (HAProxy's 502, as for a request in flight). A host is dead once nothing of it accepts.
wait_empty() {
  local deadline=$((SECONDS + $2))
  while [ -n "$(ip netns pids "$1" 2>/dev/null || true)" ] ||
    [ -n "$(ip netns exec "$1" ss -Hltn "sport = :$NODE_PORT" 2>/dev/null || true)" ]; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

# alive PID: the process exists and is not a zombie (an orphan's zombie lingers until init reaps it).
alive() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# The regions of this run's supervisors that are gone (a SIGKILLed supervisor cannot unlink its own).
unlink_regions() {
  local pid
  [ -f "$DIR/primaries" ] || return 0
  while read -r pid; do
    [ -z "$pid" ] || alive "$pid" || rm -f /dev/shm/ringserve-"$pid"-*
  done <"$DIR/primaries"
}

render_haproxy() {
  local i servers=""
  for ((i = 0; i < NODES; i++)); do
    servers+="    server node$i $(node_addr "$i"):$NODE_PORT"$'\n'
  done
  awk -v servers="$servers" '
    /# BEGIN servers/ { print; printf "%s", servers; skip = 1; next }
    /# END servers/ { skip = 0 }
    !skip { print }
  ' "$ROOT/ops/lb/haproxy.cfg" >"$DIR/haproxy.cfg"
}

up() {
  DIR=$1
  need_tools
  mkdir -p "$DIR"
  [ ! -e "$DIR/env" ] || die "$DIR already holds a cluster"
  local id a b
  # A fresh id: `down` signals whatever runs in rs-<id>-*, so an id in use must never be taken.
  id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
  while ip netns list | grep -q "^rs-$id-"; do id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n'); done
  a=$((100 + 16#${id:0:2} % 100))
  b=$((16#${id:2:2}))
  {
    echo "RUN_ID=$id"
    echo "NODES=${RS_NODES:-3}"
    echo "SUBNET=10.$a.$b"
    echo "API_KEY=${RS_API_KEY:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}"
    printf 'SERVE_ARGS=%q\n' "${RS_SERVE_ARGS:-$DEFAULT_SERVE_ARGS}"
  } >"$DIR/env"
  load_env "$DIR"
  trap 'echo "cluster.sh: up failed; tearing down" >&2; down "$DIR"' EXIT

  local lb="rs-${RUN_ID}-lb" i ns
  ip netns add "$lb"
  ip -n "$lb" link set lo up
  ip -n "$lb" link add br0 type bridge
  ip -n "$lb" addr add "$SUBNET.1/24" dev br0
  ip -n "$lb" link set br0 up
  for ((i = 0; i < NODES; i++)); do
    ns=$(node_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$lb" link add "v$i" type veth peer name eth0 netns "$ns"
    ip -n "$lb" link set "v$i" master br0 up
    ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  for ((i = 0; i < NODES; i++)); do start_node "$i"; done
  for ((i = 0; i < NODES; i++)); do wait_ready "$i"; done

  render_haproxy
  RS_LB_BIND="$SUBNET.1:$LB_PORT" RS_PROM_BIND="$SUBNET.1:$PROM_PORT" \
    RS_STATS_SOCKET="$DIR/haproxy.sock" \
    ip netns exec "$lb" haproxy -db -f "$DIR/haproxy.cfg" >>"$DIR/haproxy.log" 2>&1 </dev/null &
  echo "$!" >"$DIR/haproxy.pid"
  local deadline=$((SECONDS + 10))
  until [ -S "$DIR/haproxy.sock" ]; do
    alive "$(cat "$DIR/haproxy.pid")" || die "haproxy exited: $(tail -5 "$DIR/haproxy.log")"
    [ "$SECONDS" -lt "$deadline" ] || die "haproxy's socket did not appear"
    sleep 0.1
  done

  {
    printf '{"id":"%s","api_key":"%s","stats_socket":"%s",' "$RUN_ID" "$API_KEY" "$DIR/haproxy.sock"
    printf '"lb":{"ns":"%s","url":"http://%s:%s","prometheus":"http://%s:%s/metrics"},"nodes":[' \
      "$lb" "$SUBNET.1" "$LB_PORT" "$SUBNET.1" "$PROM_PORT"
    for ((i = 0; i < NODES; i++)); do
      [ "$i" = 0 ] || printf ','
      printf '{"name":"node%s","ns":"%s","url":"http://%s:%s"}' \
        "$i" "$(node_ns "$i")" "$(node_addr "$i")" "$NODE_PORT"
    done
    printf ']}\n'
  } >"$DIR/state.json"
  trap - EXIT
  echo "cluster.sh: $NODES nodes behind http://$SUBNET.1:$LB_PORT (namespace $lb), state in $DIR/state.json"
}

down() {
  DIR=$1
  [ -f "$DIR/env" ] || return 0
  load_env "$DIR"
  local all=("rs-${RUN_ID}-lb") i ns
  for ((i = 0; i < NODES; i++)); do all+=("$(node_ns "$i")"); done
  for ns in "${all[@]}"; do
    signal_ns "$ns" CONT
    signal_ns "$ns" TERM
  done
  # A node drains on SIGTERM (/health 503, then exits and unlinks its region); whatever is still
  # there after the bound is killed.
  for ns in "${all[@]}"; do
    wait_empty "$ns" 10 || { signal_ns "$ns" KILL && wait_empty "$ns" 5; } || true
    ip netns del "$ns" 2>/dev/null || true
  done
  unlink_regions
  rm -f "$DIR/env"
}

cmd=${1:-}
case "$cmd" in
up) up "${2:?cluster.sh up DIR}" ;;
down) down "${2:?cluster.sh down DIR}" ;;
kill-node | start-node | stop-node | cont-node | drain-node)
  load_env "${2:?cluster.sh $cmd DIR I}"
  i=${3:?cluster.sh $cmd DIR I}
  case "$cmd" in
  kill-node)
    signal_ns "$(node_ns "$i")" KILL
    wait_empty "$(node_ns "$i")" 10 ||
      die "node $i still has processes or a listener after SIGKILL"
    unlink_regions
    ;;
  start-node) start_node "$i" && wait_ready "$i" ;;
  stop-node) signal_ns "$(node_ns "$i")" STOP ;;
  cont-node) signal_ns "$(node_ns "$i")" CONT ;;
  drain-node) kill -TERM "$(cat "$DIR/node$i.pid")" ;;
  esac
  ;;
*) die "usage: cluster.sh up|down DIR | kill-node|start-node|stop-node|cont-node|drain-node DIR I" ;;
esac
