#!/usr/bin/env bash
# Starts and tears down a single RabbitMQ node whose consumer_timeout is a
# few seconds, for the consumer-timeout test
# (integration/broker_timeout_test.go calls it):
#
#   scripts/timeoutnode.sh up      start ctimeout@localhost: AMQP on 127.0.0.1:5698,
#                                  consumer_timeout CONSUMER_TIMEOUT_MS (default 2000)
#   scripts/timeoutnode.sh down    stop it and remove its directory
#
# The shared brokers keep their 30 min default: this node is the test's own,
# from the suite's installation (RabbitMQ 4.3 when RABBITMQCTL names the sid
# folder, see node-lib.sh), with its own node name, ports (distribution:
# 25698), config, data and log directories under $TIMEOUTNODE_BASE (default
# /tmp/acemq-timeoutnode). The channel tick, which is when a broker checks
# the timeout, is made 500 ms so that the check is not a minute late.
#
# `up` fails loudly (after tearing down what it started) when the node does
# not answer in time. `down` is safe to run when nothing is up.
set -Eeuo pipefail

base="${TIMEOUTNODE_BASE:-/tmp/acemq-timeoutnode}"
node=ctimeout
amqp_port=5698
dist_port=25698
timeout_ms="${CONSUMER_TIMEOUT_MS:-2000}"
start_timeout="${TIMEOUTNODE_START_TIMEOUT:-120}" # seconds
ctl_timeout=60                                     # seconds, per rabbitmqctl call
me=timeoutnode
# shellcheck source=scripts/node-lib.sh
. "$(dirname "$0")/node-lib.sh"

up() {
  in_root sh -c "command -v rabbitmq-server" >/dev/null || die "rabbitmq-server is not installed (run make broker)"
  answers "$amqp_port" && die "port $amqp_port is taken (a timeout node already up? run: $0 down)"
  prepare_base
  {
    echo "listeners.tcp.local = 127.0.0.1:$amqp_port"
    echo "consumer_timeout = $timeout_ms"
    echo "loopback_users.guest = true"
    echo "log.console = false"
    echo "log.file.level = info"
  } >"$root$base/rabbitmq.conf"
  echo "[{rabbit, [{channel_tick_interval, 500}]}]." >"$root$base/advanced.config"
  echo "[]." >"$root$base/enabled_plugins"
  own_base
  start_node "$amqp_port" "AMQP 127.0.0.1:$amqp_port, consumer_timeout ${timeout_ms} ms"
}

case "${1:-}" in
up) up ;;
down) down ;;
*) die "usage: $0 up | down" ;;
esac
