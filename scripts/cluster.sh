#!/usr/bin/env bash
# Starts, inspects and tears down a three-node RabbitMQ cluster on this
# machine for `make cluster-test`:
#
#   scripts/cluster.sh up       start c1, c2, c3@localhost and cluster them
#   scripts/cluster.sh down     stop them and remove their directories
#   scripts/cluster.sh status   show the cluster as c1 sees it
#   scripts/cluster.sh kill cN  SIGKILL node cN (a crash, for the failover test)
#   scripts/cluster.sh start cN start node cN again after a kill or stop, and
#                               wait until it runs in the cluster
#   scripts/cluster.sh ctl cN ARGS...
#                               rabbitmqctl ARGS against node cN, bounded by
#                               CLUSTER_CTL_TIMEOUT seconds (default 60)
#
# The nodes run beside the shared node (rabbit@localhost on 5672), which this
# script never touches: each has its own node name, AMQP port (5681-5683),
# distribution port (25681-25683), config file, plugins file, data and log
# directories, all under $CLUSTER_BASE (default /tmp/acemq-cluster), owned
# by the rabbitmq user. They share the Erlang cookie of the rabbitmq user
# (/var/lib/rabbitmq/.erlang.cookie): the Debian wrapper runs every
# rabbitmq-server and rabbitmqctl as that user when called as root.
#
# When RABBITMQCTL names a chroot (`eval "$(scripts/broker.sh env 4.3)"`), the
# three nodes run from that folder's RabbitMQ (a 4.3 cluster inside the sid
# folder) and $CLUSTER_BASE is a path inside it; the folder's own node
# (rabbit43@localhost) is not touched either.
#
# `up` fails loudly (after tearing down what it started) when the cluster is
# not up with three running nodes within its time bounds. `down` is safe to
# run when nothing is up.
set -Eeuo pipefail

# node-lib.sh for root, rootcmd and in_root (the installation the nodes run
# from); the node functions below are this script's own, for three nodes.
me=cluster
# shellcheck source=scripts/node-lib.sh
. "$(dirname "$0")/node-lib.sh"

base="${CLUSTER_BASE:-/tmp/acemq-cluster}"
nodes=(c1 c2 c3)
start_timeout="${CLUSTER_START_TIMEOUT:-120}" # seconds, per wait
ctl_timeout="${CLUSTER_CTL_TIMEOUT:-60}"       # seconds, per rabbitmqctl call

say() { echo "cluster: $*"; }
die() { echo "cluster: $*" >&2; exit 1; }

port() { echo $((5680 + ${1#c})); }       # c1 -> 5681
dist_port() { echo $((25680 + ${1#c})); } # c1 -> 25681

# ctl NODE ARGS...: rabbitmqctl against one of our nodes, bounded in time
# (cli: node-lib.sh's, the CLI itself as root).
ctl() {
  local node="$1"
  shift
  timeout --kill-after=10 "$ctl_timeout" "${rootcmd[@]}" "${cli[@]}" -q -n "$node@localhost" "$@"
}

# node_env NODE: the environment one node runs with. RABBITMQ_CONF_ENV_FILE
# points at a file of our own, so /etc/rabbitmq/rabbitmq-env.conf (which
# names the shared node) is not read.
node_env() {
  local n="$1" d="$base/$1"
  [ -z "$root" ] || echo "HOME=/var/lib/rabbitmq"
  echo "RABBITMQ_CONF_ENV_FILE=$d/rabbitmq-env.conf"
  echo "RABBITMQ_NODENAME=$n@localhost"
  echo "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1"
  echo "RABBITMQ_NODE_PORT=$(port "$n")"
  echo "RABBITMQ_DIST_PORT=$(dist_port "$n")"
  echo "RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf"
  echo "RABBITMQ_ADVANCED_CONFIG_FILE=$d/advanced.config"
  echo "RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins"
  echo "RABBITMQ_MNESIA_BASE=$d/mnesia"
  echo "RABBITMQ_LOG_BASE=$d/log"
  echo "RABBITMQ_PID_FILE=$d/$n.pid"
  echo "ERL_EPMD_ADDRESS=127.0.0.1"
  echo "ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}"
}

prepare() {
  local n="$1" d="$root$base/$1"
  mkdir -p "$d/mnesia" "$d/log"
  node_env "$n" | grep -v '^HOME=' | sed -e 's/^RABBITMQ_//' -e "s/^\(ERL_FLAGS=\)\(.*\)/export \1\"\2\"/" >"$d/rabbitmq-env.conf"
  cat >"$d/rabbitmq.conf" <<EOF
listeners.tcp.local = 127.0.0.1:$(port "$n")
loopback_users.guest = true
log.console = false
log.file.level = info
EOF
  echo "[]." >"$d/advanced.config"
  echo "[]." >"$d/enabled_plugins"
}

# step NODE ARGS...: a rabbitmqctl step of `up`; its chatter is shown only
# when it fails.
step() {
  local out
  if ! out="$(ctl "$@" 2>&1)"; then
    echo "$out" >&2
    echo "cluster: rabbitmqctl -n $1@localhost ${*:2} failed" >&2
    return 1
  fi
}

running() { ctl "$1" status >/dev/null 2>&1; }

# await NODE: wait (bounded) until the node's broker application is up.
await() {
  local n="$1" deadline=$((SECONDS + start_timeout))
  until ctl "$n" await_startup --timeout 10 >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "cluster: $n@localhost did not start within ${start_timeout}s; its log:" >&2
      tail -n 40 "$root$base/$n/log/$n@localhost.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 1
  done
}

running_nodes() {
  ctl c1 cluster_status --formatter json 2>/dev/null |
    grep -o '"running_nodes":\[[^]]*\]' | grep -o 'c[0-9]@localhost' | sort -u | wc -l
}

up() {
  in_root sh -c "command -v rabbitmq-server" >/dev/null || die "rabbitmq-server is not installed (run make broker)"
  for n in "${nodes[@]}"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$(port "$n")") 2>/dev/null; then
      die "port $(port "$n") is taken (a cluster already up? run: $0 down)"
    fi
  done
  if [ -e "$root$base" ]; then
    say "removing the leftovers of an earlier run"
    down
  fi
  mkdir -p "$root$base"
  for n in "${nodes[@]}"; do prepare "$n"; done
  in_root chown -R rabbitmq:rabbitmq "$base"
  chmod 755 "$root$base"

  up_ok=0
  trap '[ "${up_ok:-0}" = 1 ] || { echo "cluster: up failed; tearing down" >&2; down >&2 || true; }' EXIT
  local t0=$SECONDS
  for n in "${nodes[@]}"; do
    say "starting $n@localhost on 127.0.0.1:$(port "$n")"
    local -a envs
    mapfile -t envs < <(node_env "$n")
    in_root env "${envs[@]}" rabbitmq-server -detached
  done
  for n in "${nodes[@]}"; do await "$n"; done
  for n in c2 c3; do
    say "joining $n@localhost to c1@localhost"
    step "$n" stop_app
    step "$n" reset
    step "$n" join_cluster c1@localhost
    step "$n" start_app
    await "$n"
  done
  local deadline=$((SECONDS + start_timeout))
  until [ "$(running_nodes)" = 3 ]; do
    if ((SECONDS >= deadline)); then
      ctl c1 cluster_status >&2 || true
      die "cluster_status does not show 3 running nodes within ${start_timeout}s"
    fi
    sleep 1
  done
  up_ok=1
  say "up in $((SECONDS - t0))s: c1, c2, c3@localhost on 127.0.0.1:5681-5683 (base $base)"
}

down() {
  local n pid
  for n in "${nodes[@]}"; do
    pid="$(node_pid "$n")"
    if running "$n"; then
      say "stopping $n@localhost"
      ctl "$n" stop >/dev/null 2>&1 || echo "cluster: rabbitmqctl stop $n@localhost failed" >&2
    fi
    # Give the VM time to exit after stop; a node that did not stop (or
    # never answered) is ended by its pid.
    if [ -n "$pid" ]; then
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      if kill -0 "$pid" 2>/dev/null; then
        say "killing $n@localhost (pid $pid)"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
      fi
    fi
  done
  case "$base" in
  /tmp/* | "${TMPDIR:-/tmp}"/*) rm -rf "$root$base" ;;
  *) [ -e "$root$base" ] && echo "cluster: not removing $base (outside the temp directory)" >&2 ;;
  esac
  return 0
}

node_arg() {
  case "${1:-}" in
  c1 | c2 | c3) echo "$1" ;;
  *) die "name a node: c1, c2 or c3" ;;
  esac
}

# node_pid NODE: the pid of the node's VM, if it runs. The pid file goes
# away with the broker application (stop_app), the VM may stay: the VM is
# known by the environment this script started it with.
ours() {
  [ "$(readlink "/proc/$2/root" 2>/dev/null)" = "${root:-/}" ] &&
    tr '\0' '\n' <"/proc/$2/environ" 2>/dev/null |
    grep -qx "RABBITMQ_MNESIA_BASE=$base/$1/mnesia"
}
node_pid() {
  local n="$1" pid=""
  [ -f "$root$base/$n/$n.pid" ] && pid="$(cat "$root$base/$n/$n.pid" 2>/dev/null || true)"
  if [ -n "$pid" ] && ours "$n" "$pid"; then
    echo "$pid"
    return
  fi
  for pid in $(pgrep -x beam.smp || true); do
    if ours "$n" "$pid"; then
      echo "$pid"
      return
    fi
  done
}

kill_node() {
  local n pid
  n="$(node_arg "${1:-}")"
  pid="$(node_pid "$n")"
  [ -n "$pid" ] || die "$n@localhost is not running"
  say "killing $n@localhost (pid $pid) with SIGKILL"
  kill -9 "$pid"
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
  die "$n@localhost (pid $pid) is still there 10s after SIGKILL"
}

start_node() {
  local n
  n="$(node_arg "${1:-}")"
  [ -d "$root$base/$n" ] || die "$n@localhost was never set up (run: $0 up)"
  if [ -z "$(node_pid "$n")" ]; then
    say "starting $n@localhost on 127.0.0.1:$(port "$n")"
    local -a envs
    mapfile -t envs < <(node_env "$n")
    in_root env "${envs[@]}" rabbitmq-server -detached
  elif ! ctl "$n" await_startup --timeout 5 >/dev/null 2>&1; then
    step "$n" start_app
  fi
  await "$n"
  say "$n@localhost is up"
}

status() {
  local n
  for n in "${nodes[@]}"; do
    if running "$n"; then say "$n@localhost running"; else say "$n@localhost not running"; fi
  done
  running c1 && ctl c1 cluster_status
  return 0
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
kill) kill_node "${2:-}" ;;
start) start_node "${2:-}" ;;
ctl)
  case "${2:-}" in c1 | c2 | c3) ;; *) die "name a node: c1, c2 or c3" ;; esac
  ctl "${@:2}"
  ;;
*) die "usage: $0 up|down|status|kill cN|start cN|ctl cN ARGS..." ;;
esac
