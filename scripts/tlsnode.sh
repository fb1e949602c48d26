#!/usr/bin/env bash
# Starts and tears down a single RabbitMQ node with a TLS listener, for the
# TLS tests (`make tls-test`; integration/tls_test.go calls it with the
# certificates it generated):
#
#   scripts/tlsnode.sh up CERT_DIR   start tls@localhost: AMQP on 127.0.0.1:5690,
#                                    AMQPS on 127.0.0.1:5691 with CERT_DIR's
#                                    ca.pem, server.pem and server-key.pem
#   scripts/tlsnode.sh down          stop it and remove its directory
#
# The node runs beside the shared node (rabbit@localhost on 5672), which this
# script never touches: its own node name, ports (distribution: 25690),
# config file, plugins file, data and log directories, all under
# $TLSNODE_BASE (default /tmp/acemq-tlsnode), owned by the rabbitmq user,
# with copies of the certificates (the rabbitmq user cannot read a test's
# temp dir). Peers are not asked for certificates (verify_none): the tests
# are about the client verifying the server.
#
# `up` fails loudly (after tearing down what it started) when the node does
# not answer on both ports in time. `down` is safe to run when nothing is up.
set -Eeuo pipefail

base="${TLSNODE_BASE:-/tmp/acemq-tlsnode}"
node=tls
amqp_port=5690
amqps_port=5691
dist_port=25690
start_timeout="${TLSNODE_START_TIMEOUT:-120}" # seconds
ctl_timeout=60                                # seconds, per rabbitmqctl call
me=tlsnode
# shellcheck source=scripts/node-lib.sh
. "$(dirname "$0")/node-lib.sh"

up() {
  local certs="${1:-}"
  [ -n "$certs" ] || die "usage: $0 up CERT_DIR"
  for f in ca.pem server.pem server-key.pem; do
    [ -r "$certs/$f" ] || die "$certs/$f is missing"
  done
  in_root sh -c "command -v rabbitmq-server" >/dev/null || die "rabbitmq-server is not installed (run make broker)"
  for p in "$amqp_port" "$amqps_port"; do
    answers "$p" && die "port $p is taken (a TLS node already up? run: $0 down)"
  done
  prepare_base
  mkdir -p "$root$base/certs"
  cp "$certs/ca.pem" "$certs/server.pem" "$certs/server-key.pem" "$root$base/certs/"
  {
    echo "listeners.tcp.local = 127.0.0.1:$amqp_port"
    echo "listeners.ssl.local = 127.0.0.1:$amqps_port"
    echo "ssl_options.cacertfile = $base/certs/ca.pem"
    echo "ssl_options.certfile = $base/certs/server.pem"
    echo "ssl_options.keyfile = $base/certs/server-key.pem"
    echo "ssl_options.verify = verify_none"
    echo "ssl_options.fail_if_no_peer_cert = false"
    echo "loopback_users.guest = true"
    echo "log.console = false"
    echo "log.file.level = info"
  } >"$root$base/rabbitmq.conf"
  echo "[]." >"$root$base/advanced.config"
  echo "[]." >"$root$base/enabled_plugins"
  own_base
  chmod 600 "$root$base/certs/server-key.pem"
  start_node "$amqps_port" "AMQP 127.0.0.1:$amqp_port, AMQPS 127.0.0.1:$amqps_port"
}

case "${1:-}" in
up) up "${2:-}" ;;
down) down ;;
*) die "usage: $0 up CERT_DIR | down" ;;
esac
