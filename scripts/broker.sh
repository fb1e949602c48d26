#!/usr/bin/env bash
# Brokers of every RabbitMQ version the suite runs on, beside each other:
#
#   scripts/broker.sh                 same as `up 3.10` (make broker, test, demo)
#   scripts/broker.sh up [VERSION]    make sure a node of VERSION answers
#   scripts/broker.sh down VERSION    stop that node (4.0 and 4.3 only)
#   scripts/broker.sh env VERSION     up, then print `export AMQP_URL=…` and
#                                     `export RABBITMQCTL=…` lines, for
#                                     eval "$(scripts/broker.sh env 4.3)"
#   scripts/broker.sh ctl VERSION ARGS...
#                                     rabbitmqctl ARGS against that node, bounded
#                                     (BROKER_CTL_TIMEOUT seconds, default 60)
#   scripts/broker.sh versions        the versions it knows, one a line
#
# VERSION 3.10 (the default) is the machine's own broker: rabbit@localhost on
# 127.0.0.1:5672, the Debian package; when none answers it is started, and
# installed first when missing. This script never stops it and never changes
# its configuration.
#
# VERSION 4.0 and 4.3 run from Debian's own packages in debootstrapped folders
# under $BROKERS_DIR (default /var/cache/acemq/brokers, outside any clone, so
# a fresh clone reuses them): trixie (rabbitmq-server 4.0.5) and sid (4.3.6),
# each on its own node name and ports:
#
#   4.3  sid     rabbit43@localhost  AMQP 127.0.0.1:5673  distribution 25673
#   4.0  trixie  rabbit40@localhost  AMQP 127.0.0.1:5674  distribution 25674
#
# `up` adopts a node already running in that layout (started by hand or by an
# earlier run), and otherwise builds what is missing: the folder (debootstrap
# from the mirror apt already uses, ~400 MB and ~1.5 min each), /proc and /dev
# mounted into it, /etc/hosts copied, then the node started detached. It says
# what it installs before it installs it, and fails loudly when no node
# answers in time. A marker <suite>.up is touched beside the folder when the
# node answers.
set -euo pipefail

me=broker
brokers_dir="${BROKERS_DIR:-/var/cache/acemq/brokers}"
start_timeout="${BROKER_START_TIMEOUT:-120}" # seconds
ctl_timeout="${BROKER_CTL_TIMEOUT:-60}"       # seconds, per rabbitmqctl call

say() { echo "$me: $*" >&2; }
die() { echo "$me: $*" >&2; exit 1; }
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
sudo_cmd() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# layout VERSION: sets suite, node, amqp_port, dist_port (and dir).
layout() {
  case "$1" in
  3.10 | 3) suite="" node="rabbit@localhost" amqp_port="${AMQP_PORT:-5672}" dist_port="" ;;
  4.3) suite=sid node="rabbit43@localhost" amqp_port=5673 dist_port=25673 ;;
  4.0) suite=trixie node="rabbit40@localhost" amqp_port=5674 dist_port=25674 ;;
  *) die "unknown version '$1' (known: 3.10, 4.0, 4.3)" ;;
  esac
  dir=""
  [ -z "$suite" ] || dir="$brokers_dir/$suite"
}

# ctl ARGS...: rabbitmqctl against the version's node, bounded in time.
# As root it runs the CLI itself rather than Debian's wrapper
# (/usr/sbin/rabbitmqctl), which runs it through su in a session of its
# own: timeout's kill would reach only the wrapper, and the CLI's VM would
# live on, holding one of the eleven ports every CLI of that RabbitMQ may
# listen on (with all eleven taken, no rabbitmqctl starts). HOME is the
# rabbitmq user's, for the node's cookie.
ctl() {
  local -a cli=(rabbitmqctl)
  if [ "$(id -u)" -eq 0 ] && [ -x "$dir/usr/lib/rabbitmq/bin/rabbitmqctl" ]; then
    cli=(env HOME=/var/lib/rabbitmq /usr/lib/rabbitmq/bin/rabbitmqctl)
  fi
  if [ -z "$suite" ]; then
    timeout --kill-after=10 "$ctl_timeout" "${cli[@]}" -q "$@"
  else
    timeout --kill-after=10 "$ctl_timeout" chroot "$dir" "${cli[@]}" -q -n "$node" "$@"
  fi
}

# The machine's broker: today's behaviour of broker.sh, unchanged.
up_local() {
  ready() { answers "$amqp_port" && rabbitmqctl -q await_startup >/dev/null 2>&1; }
  if answers "$amqp_port" && { ! command -v rabbitmqctl >/dev/null || ready; }; then
    say "RabbitMQ answers on 127.0.0.1:$amqp_port"
    return 0
  fi
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    "$(dirname "$0")/apt-install.sh" "rabbitmq-server is not installed: the local broker" rabbitmq-server
  fi
  if ! answers "$amqp_port"; then
    say "starting rabbitmq-server -detached"
    rabbitmq-server -detached || true
  fi
  for _ in $(seq 1 90); do
    if ready; then
      say "RabbitMQ is up on 127.0.0.1:$amqp_port"
      return 0
    fi
    sleep 1
  done
  die "RabbitMQ did not come up on 127.0.0.1:$amqp_port within 90 s"
}

# mirror: the Debian mirror apt already uses on this machine.
mirror() {
  local m
  m="$(grep -hs -E '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list 2>/dev/null |
    grep -v -e security -e '\[.*\]' | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+//; s/[[:space:]].*//' | head -n 1)"
  echo "${m:-http://deb.debian.org/debian}"
}

# build: the debootstrapped folder, when it is missing or incomplete.
build() {
  [ -x "$dir/usr/sbin/rabbitmq-server" ] && return 0
  mkdir -p "$brokers_dir"
  if ! command -v debootstrap >/dev/null 2>&1; then
    # debian-archive-keyring, a recommend, is what checks the suite's
    # Release file: named, as recommends are not installed.
    "$(dirname "$0")/apt-install.sh" "debootstrap is not installed: it builds the broker's folder" debootstrap debian-archive-keyring
  fi
  local m
  m="$(mirror)"
  if [ -e "$dir" ]; then
    say "$dir has no rabbitmq-server: removing it to build it again"
    unmount
    rm -rf --one-file-system "$dir"
  fi
  say "installing Debian $suite (minbase) with its rabbitmq-server package into $dir from $m (about 400 MB, 1.5 min; log $dir.log)"
  if ! sudo_cmd debootstrap --variant=minbase --include=rabbitmq-server "$suite" "$dir" "$m" >"$dir.log" 2>&1; then
    tail -n 20 "$dir.log" >&2
    die "debootstrap of $suite failed (log $dir.log)"
  fi
}

mounts() {
  mountpoint -q "$dir/proc" || sudo_cmd mount -t proc proc "$dir/proc"
  mountpoint -q "$dir/dev" || sudo_cmd mount --bind /dev "$dir/dev"
  cmp -s /etc/hosts "$dir/etc/hosts" || cp /etc/hosts "$dir/etc/hosts"
}

unmount() {
  ! mountpoint -q "$dir/proc" 2>/dev/null || sudo_cmd umount "$dir/proc" || true
  ! mountpoint -q "$dir/dev" 2>/dev/null || sudo_cmd umount "$dir/dev" || true
}

up_chroot() {
  mkdir -p "$brokers_dir"
  exec 9>"$brokers_dir/.$suite.lock"
  flock 9 # one `up` per folder at a time: parallel callers wait, then adopt
  if answers "$amqp_port" && ctl await_startup --timeout 10 >/dev/null 2>&1; then
    touch "$brokers_dir/$suite.up"
    say "RabbitMQ $version answers on 127.0.0.1:$amqp_port ($node in $dir)"
    return 0
  fi
  answers "$amqp_port" && die "127.0.0.1:$amqp_port answers, but not as $node in $dir"
  build
  mounts
  rm -f "$brokers_dir/$suite.up"
  say "starting $node in $dir: AMQP 127.0.0.1:$amqp_port, distribution $dist_port"
  # The node must not inherit the lock (fd 9) nor our output: it outlives
  # this script, and would hold the one and keep a caller's $(…) open.
  if ! chroot "$dir" env HOME=/var/lib/rabbitmq RABBITMQ_NODENAME="$node" \
    RABBITMQ_NODE_PORT="$amqp_port" RABBITMQ_DIST_PORT="$dist_port" rabbitmq-server -detached \
    9>&- </dev/null >"$brokers_dir/$suite.start.log" 2>&1; then
    say "rabbitmq-server -detached failed (a node still starting?); waiting for it all the same:"
    cat "$brokers_dir/$suite.start.log" >&2
  fi
  local deadline=$((SECONDS + start_timeout))
  until answers "$amqp_port" && ctl await_startup --timeout 10 >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      tail -n 40 "$dir/var/log/rabbitmq/$node.log" >&2 2>/dev/null || true
      die "$node did not answer on 127.0.0.1:$amqp_port within ${start_timeout}s"
    fi
    sleep 1
  done
  touch "$brokers_dir/$suite.up"
  say "RabbitMQ $version is up on 127.0.0.1:$amqp_port ($node in $dir)"
}

up() {
  version="${1:-3.10}"
  layout "$version"
  if [ -z "$suite" ]; then up_local; else up_chroot; fi
}

down() {
  version="${1:-}"
  [ -n "$version" ] || die "usage: $0 down 4.0|4.3"
  layout "$version"
  [ -n "$suite" ] || die "never stopping the machine's own broker (3.10 on 5672)"
  rm -f "$brokers_dir/$suite.up"
  if ctl status >/dev/null 2>&1; then
    say "stopping $node in $dir"
    ctl stop >/dev/null
  else
    say "$node is not running"
  fi
}

env_lines() {
  up "${1:-3.10}" >&2
  local ctlcmd="rabbitmqctl"
  [ -z "$suite" ] || ctlcmd="chroot $dir rabbitmqctl -n $node"
  echo "export AMQP_URL='amqp://guest:guest@127.0.0.1:$amqp_port/'"
  echo "export RABBITMQCTL='$ctlcmd'"
}

case "${1:-up}" in
up) up "${2:-3.10}" ;;
down) down "${2:-}" ;;
env) env_lines "${2:-3.10}" ;;
ctl)
  [ $# -ge 3 ] || die "usage: $0 ctl VERSION ARGS..."
  layout "$2"
  shift 2
  ctl "$@"
  ;;
versions) printf '%s\n' 3.10 4.0 4.3 ;;
*) die "usage: $0 [up [VERSION] | down VERSION | env VERSION | ctl VERSION ARGS... | versions]" ;;
esac
