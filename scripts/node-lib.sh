# Shared by the scripts that run a RabbitMQ node of their own beside the
# shared broker (tlsnode.sh, mgmtnode.sh): sourced, not run. The caller sets
#
#   me             the script's name, for its messages
#   base           the node's directory (under the temp directory)
#   node           the node name (NODE@localhost)
#   amqp_port      its AMQP listener, on 127.0.0.1
#   dist_port      its Erlang distribution port
#   start_timeout  seconds `start_node` waits for the node to answer
#   ctl_timeout    seconds per rabbitmqctl call
#
# and writes the node's rabbitmq.conf, advanced.config and enabled_plugins
# itself (under "$root$base": see below); everything else — the environment the node runs in, starting it,
# finding its VM and tearing it down — is here, once.

say() { echo "$me: $*"; }
die() { echo "$me: $*" >&2; exit 1; }

# root: the installation the node runs from. Empty is the machine's own
# RabbitMQ; when RABBITMQCTL names a chroot (scripts/broker.sh env 4.3 prints
# `chroot /var/cache/acemq/brokers/sid rabbitmqctl -n …`), the node runs
# from that folder's RabbitMQ, so a suite on 4.3 gets a 4.3 node of its own.
# $base is then a path inside the folder; "$root$base" is the same place as
# seen from outside.
root="" rootcmd=()
if [[ "${RABBITMQCTL:-}" =~ ^chroot[[:space:]]+([^[:space:]]+) ]]; then
  root="${BASH_REMATCH[1]}" rootcmd=(chroot "${BASH_REMATCH[1]}")
fi
# in_root CMD...: run CMD in the node's installation.
in_root() { "${rootcmd[@]}" "$@"; }

# cli: the rabbitmqctl ctl runs. As root, the CLI itself with the rabbitmq
# user's HOME (its Erlang cookie), not Debian's wrapper: the wrapper's su
# puts the CLI's VM out of reach of timeout's kill, so a call cut off by
# ctl_timeout would leave it running, holding a CLI port (as in
# scripts/broker.sh's ctl).
cli=(rabbitmqctl)
if [ "$(id -u)" -eq 0 ] && [ -x "$root/usr/lib/rabbitmq/bin/rabbitmqctl" ]; then
  cli=(env HOME=/var/lib/rabbitmq /usr/lib/rabbitmq/bin/rabbitmqctl)
fi
ctl() { timeout --kill-after=10 "$ctl_timeout" "${rootcmd[@]}" "${cli[@]}" -q -n "$node@localhost" "$@"; }
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

node_env() {
  [ -z "$root" ] || echo "HOME=/var/lib/rabbitmq"
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

# prepare_base: a fresh $base (leftovers of an earlier run torn down first),
# with the env file the node reads, and a trap that tears everything down if
# `up` does not get to set up_ok=1.
prepare_base() {
  if [ -e "$root$base" ]; then
    say "removing the leftovers of an earlier run"
    down
  fi
  up_ok=0
  trap '[ "${up_ok:-0}" = 1 ] || { echo "$me: up failed; tearing down" >&2; down >&2 || true; }' EXIT
  mkdir -p "$root$base/mnesia" "$root$base/log"
  node_env | grep -v '^HOME=' | sed -e 's/^RABBITMQ_//' -e "s/^\(ERL_FLAGS=\)\(.*\)/export \1\"\2\"/" >"$root$base/rabbitmq-env.conf"
}

# own_base: hand $base to the installation's rabbitmq user (its uid differs
# between the machine and a chroot).
own_base() {
  in_root chown -R rabbitmq:rabbitmq "$base"
  chmod 755 "$root$base"
}

# start_node PORT WHAT: start the node and wait until it has started and
# answers on PORT; fails loudly with the tail of its log after
# start_timeout. WHAT says what it listens on, for the message.
start_node() {
  local port="$1" what="$2" t0=$SECONDS
  say "starting $node@localhost: $what"
  local -a envs
  mapfile -t envs < <(node_env)
  in_root env "${envs[@]}" rabbitmq-server -detached
  local deadline=$((SECONDS + start_timeout))
  until ctl await_startup --timeout 10 >/dev/null 2>&1 && answers "$port"; do
    if ((SECONDS >= deadline)); then
      echo "$me: $node@localhost did not answer on $port within ${start_timeout}s; its log:" >&2
      tail -n 40 "$root$base/log/$node@localhost.log" >&2 2>/dev/null || true
      exit 1
    fi
    sleep 1
  done
  up_ok=1
  say "up in $((SECONDS - t0))s"
}

# node_pid: the pid of our node's VM, if it runs. The pid file goes away
# with the broker application; the VM is known by the environment it was
# started with.
ours() {
  [ "$(readlink "/proc/$1/root" 2>/dev/null)" = "${root:-/}" ] &&
    tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -qx "RABBITMQ_MNESIA_BASE=$base/mnesia"
}
node_pid() {
  local pid=""
  [ -f "$root$base/$node.pid" ] && pid="$(cat "$root$base/$node.pid" 2>/dev/null || true)"
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

# down: stop the node (by its pid if rabbitmqctl cannot) and remove $base;
# safe to run when nothing is up.
down() {
  local pid
  pid="$(node_pid)"
  if ctl status >/dev/null 2>&1; then
    say "stopping $node@localhost"
    ctl stop >/dev/null 2>&1 || echo "$me: rabbitmqctl stop $node@localhost failed" >&2
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
  /tmp/* | "${TMPDIR:-/tmp}"/*) rm -rf "$root$base" ;;
  *) [ -e "$root$base" ] && echo "$me: not removing $base (outside the temp directory)" >&2 ;;
  esac
  return 0
}
