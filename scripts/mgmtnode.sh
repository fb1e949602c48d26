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
me=mgmtnode
# shellcheck source=scripts/node-lib.sh
. "$(dirname "$0")/node-lib.sh"

up() {
  in_root sh -c "command -v rabbitmq-server" >/dev/null || die "rabbitmq-server is not installed (run make broker)"
  for p in "$amqp_port" "$http_port"; do
    answers "$p" && die "port $p is taken (a management node already up? run: $0 down)"
  done
  prepare_base
  {
    echo "listeners.tcp.local = 127.0.0.1:$amqp_port"
    echo "management.tcp.ip = 127.0.0.1"
    echo "management.tcp.port = $http_port"
    echo "loopback_users.guest = true"
    echo "log.console = false"
    echo "log.file.level = info"
  } >"$root$base/rabbitmq.conf"
  echo "[]." >"$root$base/advanced.config"
  echo "[rabbitmq_management]." >"$root$base/enabled_plugins"
  own_base
  start_node "$http_port" "AMQP 127.0.0.1:$amqp_port, management API 127.0.0.1:$http_port"
}

case "${1:-}" in
up) up ;;
down) down ;;
*) die "usage: $0 up | down" ;;
esac
