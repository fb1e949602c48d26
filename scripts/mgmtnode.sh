#!/usr/bin/env bash
# Starts and tears down a single RabbitMQ node with the management plugin,
# for the console's management API test (integration/console_management_test.go
# calls it):
#
#   scripts/mgmtnode.sh up      start mgmt@localhost: AMQP on 127.0.0.1:5696,
#                               the management API on 127.0.0.1:15696
#   scripts/mgmtnode.sh down    stop it and remove its directory
#
# The node runs beside the shared node (rabbit@localhost on 5672), which this
# script never touches and whose plugins it never changes: the plugin is
# enabled in this node's own plugins file only. Its own node name, ports
# (distribution: 25696), config file, data and log directories are all under
# $MGMTNODE_BASE (default /tmp/acemq-mgmtnode), owned by the rabbitmq user.
#
# `up` fails loudly (after tearing down what it started) when the node does
# not answer on both ports in time. `down` is safe to run when nothing is up.
set -Eeuo pipefail

base="${MGMTNODE_BASE:-/tmp/acemq-mgmtnode}"
node=mgmt
amqp_port=5696
http_port=15696
dist_port=25696
start_timeout="${MGMTNODE_START_TIMEOUT:-120}" # seconds
ctl_timeout=60                                 # seconds, per rabbitmqctl call

say() { echo "mgmtnode: $*"; }
die() { echo "mgmtnode: $*" >&2; exit 1; }

[ -n "$base" ] || die "MGMTNODE_BASE is empty"

ctl() { timeout --kill-after=10 "$ctl_timeout" rabbitmqctl -q -n "$node@localhost" "$@"; }
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

node_env() {
  echo "RABBITMQ_CONF_ENV_FILE=$base/rabbitmq-env.conf"
  echo "RABBITMQ_NODENAME=$node@localhost"
  echo "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1"
  echo "RABBITMQ_NODE_PORT=$amqp_port"
  echo "RABBITMQ_DIST_PORT=$dist_port"
  echo "RABBITMQ_CONFIG_FILE=$base/rabbitmq.conf"
  echo "RABBITMQ_ADVANCED_CONFIG_FILE=$base/advanced.config"
  echo "RABBITMQ_ENABLED_PLUGINS_FILE=$base/enabled_plugins"
  echo "RABBITMQ_MNESIA_BASE=$base/mnesia"
  echo "RABBITMQ_LOG_BASE=$base/log"
  echo "RABBITMQ_PID_FILE=$base/$node.pid"
  echo "ERL_EPMD_ADDRESS=127.0.0.1"
  echo "ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}"
}

up() {
  command -v rabbitmq-server >/dev/null || die "rabbitmq-server is not installed (run make broker)"
  for p in "$amqp_port" "$http_port"; do
    answers "$p" && die "port $p is taken (a management node already up? run: $0 down)"
  done
  if [ -e "$base" ]; then
    say "removing the leftovers of an earlier run"
    down
  fi

  up_ok=0
  trap '[ "${up_ok:-0}" = 1 ] || { echo "mgmtnode: up failed; tearing down" >&2; down >&2 || true; }' EXIT
  mkdir -p "$base/mnesia" "$base/log"
  node_env | sed -e 's/^RABBITMQ_//' -e "s/^\(ERL_FLAGS=\)\(.*\)/export \1\"\2\"/" >"$base/rabbitmq-env.conf"
  {
    echo "listeners.tcp.local = 127.0.0.1:$amqp_port"
    echo "management.tcp.ip = 127.0.0.1"
    echo "management.tcp.port = $http_port"
    echo "loopback_users.guest = true"
    echo "log.console = false"
    echo "log.file.level = info"
  } >"$base/rabbitmq.conf"
  echo "[]." >"$base/advanced.config"
  echo "[rabbitmq_management]." >"$base/enabled_plugins"
  chown -R rabbitmq:rabbitmq "$base"
  chmod 755 "$base"

  local t0=$SECONDS
  say "starting $node@localhost: AMQP 127.0.0.1:$amqp_port, management API 127.0.0.1:$http_port"
  local -a envs
  mapfile -t envs < <(node_env)
  env "${envs[@]}" rabbitmq-server -detached
  local deadline=$((SECONDS + start_timeout))
  until ctl await_startup --timeout 10 >/dev/null 2>&1 && answers "$http_port"; do
    if ((SECONDS >= deadline)); then
      echo "mgmtnode: $node@localhost did not answer on $http_port within ${start_timeout}s; its log:" >&2
      tail -n 40 "$base/log/$node@localhost.log" >&2 2>/dev/null || true
      exit 1
    fi
    sleep 1
  done
  up_ok=1
  say "up in $((SECONDS - t0))s"
}

# node_pid: the pid of our node's VM, if it runs. The pid file goes away
# with the broker application; the VM is known by the environment this
# script started it with.
ours() {
  tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -qx "RABBITMQ_MNESIA_BASE=$base/mnesia"
}
node_pid() {
  local pid=""
  [ -f "$base/$node.pid" ] && pid="$(cat "$base/$node.pid" 2>/dev/null || true)"
  if [ -n "$pid" ] && ours "$pid"; then
    echo "$pid"
    return
  fi
  for pid in $(pgrep -x beam.smp || true); do
    if ours "$pid"; then
      echo "$pid"
      return
    fi
  done
}

down() {
  local pid
  pid="$(node_pid)"
  if ctl status >/dev/null 2>&1; then
    say "stopping $node@localhost"
    ctl stop >/dev/null 2>&1 || echo "mgmtnode: rabbitmqctl stop $node@localhost failed" >&2
  fi
  # Give the VM time to exit after stop; a node that did not stop (or never
  # answered) is ended by its pid.
  if [ -n "$pid" ]; then
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      say "killing $node@localhost (pid $pid)"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  case "$base" in
  /tmp/* | "${TMPDIR:-/tmp}"/*) rm -rf "$base" ;;
  *) [ -e "$base" ] && echo "mgmtnode: not removing $base (outside the temp directory)" >&2 ;;
  esac
  return 0
}

case "${1:-}" in
up) up ;;
down) down ;;
*) die "usage: $0 up | down" ;;
esac
