#!/usr/bin/env bash
# Makes sure a RabbitMQ broker answers on AMQP_URL's port (default 5672):
# starts the local rabbitmq-server if none answers, installing the Debian
# package first if it is missing. Used by `make broker`, which `make test`,
# `make demo` and .ci/run depend on. Fails loudly when no broker comes up.
set -euo pipefail

port="${AMQP_PORT:-5672}"
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }
ready() { answers && rabbitmqctl -q await_startup >/dev/null 2>&1; }

if answers && { ! command -v rabbitmqctl >/dev/null || ready; }; then
  echo "broker: RabbitMQ answers on 127.0.0.1:$port"
  exit 0
fi

if ! command -v rabbitmq-server >/dev/null 2>&1; then
  echo "broker: rabbitmq-server is not installed; installing the Debian package"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq rabbitmq-server
fi

if ! answers; then
  echo "broker: starting rabbitmq-server -detached"
  rabbitmq-server -detached || true
fi

for _ in $(seq 1 90); do
  if ready; then
    echo "broker: RabbitMQ is up on 127.0.0.1:$port"
    exit 0
  fi
  sleep 1
done
echo "broker: RabbitMQ did not come up on 127.0.0.1:$port within 90 s" >&2
exit 1
