#!/usr/bin/env bash
# The field (issue 30; the interface is fixed in FIELD.md): a three-node
# RabbitMQ 4.3 cluster that can be partitioned, and a PostgreSQL of its own.
#
#   up                       f1@127.0.0.21, f2@127.0.0.22, f3@127.0.0.23
#                            (AMQP 5701-5703), clustered, and PostgreSQL 15 on
#                            127.0.0.1:5441 (database field); idempotent
#   down                     remove all of it (nodes, dirs, nft table, tc
#                            qdisc, PostgreSQL); safe at any time
#   urls                     the three AMQP URLs, comma-separated
#   pg-url                   the PostgreSQL URL
#   partition G1 G2          cut distribution both ways between the groups
#                            (e.g. `partition f1 f2,f3`)
#   partition-oneway FROM TO drop packets from FROM's nodes to TO's only
#   isolate-clients fN       drop AMQP traffic to and from fN's AMQP port
#   heal                     remove every cut
#   cut-ok                   exit 0 iff every cut still in force is in place
#   netem fN ARGS...         netem (delay/loss...) on traffic to fN's address
#   netem-clear              remove all netem
#   kill|start|stop|restart fN
#   pg-kill|pg-start|pg-restart
#   leader QUEUE [VHOST]     f1/f2/f3 leading a quorum queue, or empty
#   queue-nodes PREFIX       "QUEUE fN" per queue named PREFIX…: its node
#   quorum-leaders           "QUEUE fN" per quorum queue: the node leading it
#   ctl ARGS...              rabbitmqctl against a running node (bounded)
#   dlx-confirm-timeout      each running node's dead_letter_worker_
#                            publisher_confirm_timeout (ms), as it took it
#   status                   a human summary
#
# FIELD_INSTANCE=N (1-9; default 0, the addresses above) runs a second field
# beside the first, sharing nothing: nodes on 127.0.N.21-23, AMQP ports
# 5701+10N.., distribution 25701+10N.. (RabbitMQ refuses a distribution port
# another node uses on another address), epmd on 4371+N, PostgreSQL on
# 5441+N, dirs,
# nft tables and htb classes of its own (names suffixed with N). `make
# field-facts` measures on instance 1 while `make field` runs on 0.
#
# How a cut works. Each node has a loopback address of its own (all of
# 127/8 is on lo): it listens for AMQP and distribution there
# (inet_dist_use_interface) and opens its distribution connections from it
# (inet_dist_connect_options {ip, …}), so a packet between two nodes carries
# both nodes' addresses and an nftables rule on saddr/daddr cuts exactly that
# pair. Clients and rabbitmqctl connect from 127.0.0.1 and are not touched by
# a partition. The nodes use an epmd of the field's own on port $epmd_port
# (ERL_EPMD_PORT), never the machine's on 4369. All rules live in the table
# `inet acemq_field`; only that table is ever created or deleted. nftables is
# installed (Debian package nftables, apt-get) when missing.
#
# net_ticktime is $FIELD_TICKTIME seconds (default 10, RabbitMQ's default is
# 60): a cut node is seen down after 10-15 s rather than 64-70 s, so a
# partition of 30 s is one the cluster notices.
#
# dead_letter_worker_publisher_confirm_timeout is $FIELD_DLX_CONFIRM_TIMEOUT
# ms (default 15000, as RabbitMQ's Jepsen setup has it; RabbitMQ's default
# is 180000): how long a quorum queue's at-least-once dead-letter worker
# waits for the confirm of a dead letter before it publishes it again. A
# durable rung's dead letters sent into a cut are re-sent after this, so a
# wait ends at most about this late after a heal, not three minutes late
# (docs/field.md). RabbitMQ 4.3.6's rabbitmq.conf has no key for it: it
# goes in advanced.config, as rabbit's application environment.
#
# Every command prints on stdout only what it is asked for (urls, pg-url,
# leader, status); progress goes to stderr. Every call to rabbitmqctl is
# bounded (a partitioned cluster can make it hang 20-60 s).
set -Eeuo pipefail

brokers_dir="${BROKERS_DIR:-/var/cache/acemq/brokers}"
# node-lib.sh takes the installation from RABBITMQCTL: the field always runs
# the sid folder's RabbitMQ 4.3.
RABBITMQCTL="chroot $brokers_dir/sid rabbitmqctl"
me=field
# shellcheck source=scripts/node-lib.sh
. "$(dirname "$0")/node-lib.sh"
say() { echo "$me: $*" >&2; }

nodes=(f1 f2 f3)
inst="${FIELD_INSTANCE:-0}"
[[ "$inst" =~ ^[0-9]$ ]] || die "FIELD_INSTANCE is a digit (got '$inst')"
net="127.0.$inst"       # the nodes' addresses: $net.21-23
sfx="" tsfx=""          # instance 0 has the plain names
[ "$inst" = 0 ] || sfx="-$inst" tsfx="_$inst"
fbase=/tmp/acemq-field$sfx       # inside the sid folder: the nodes' dirs
state=/tmp/acemq-field-state$sfx # on the machine: the cuts in force, netem
pgdir=/tmp/acemq-field-pg$sfx    # on the machine: the field's PostgreSQL
pg_port=$((5441 + inst))
epmd_port=$((4371 + inst))
epmd_addrs="127.0.0.1,$net.21,$net.22,$net.23"
ticktime="${FIELD_TICKTIME:-10}"
dlx_confirm_timeout="${FIELD_DLX_CONFIRM_TIMEOUT:-15000}" # ms
[[ "$dlx_confirm_timeout" =~ ^[1-9][0-9]*$ ]] || die "FIELD_DLX_CONFIRM_TIMEOUT is milliseconds (got '$dlx_confirm_timeout')"
start_timeout="${FIELD_START_TIMEOUT:-180}" # seconds, per wait
ctl_timeout="${FIELD_CTL_TIMEOUT:-30}"      # seconds, per rabbitmqctl call
table="inet acemq_field$tsfx"
tc_handle=a5 # our htb qdisc on lo is a5:; anything else there is not ours

node_arg() {
  case "${1:-}" in
  f1 | f2 | f3) echo "$1" ;;
  *) die "name a node: f1, f2 or f3 (got '${1:-}')" ;;
  esac
}
addr() { echo "$net.2${1#f}"; }             # f1 -> 127.0.0.21
port() { echo $((5700 + 10 * inst + ${1#f})); }   # f1 -> 5701 (instance 1: 5711)
dport() { echo $((25700 + 10 * inst + ${1#f})); } # f1 -> 25701 (25711)
name() { echo "$1@$(addr "$1")"; }          # f1 -> f1@127.0.0.21
erl_ip() { echo "{$(addr "$1" | tr . ,)}"; } # f1 -> {127,0,0,21}

# use NODE: point node-lib's node/base at one node (for node_pid, ours).
use() { node="$1" base="$fbase/$1"; }

# fctl NODE ARGS...: rabbitmqctl against a field node, bounded in time.
# It runs the CLI itself as root, not Debian's /usr/sbin wrapper: that one
# goes through su, whose session timeout's kill does not reach, and a CLI
# cut off there lived on, holding one of the eleven ports every
# rabbitmqctl of this RabbitMQ listens on, until none could start
# (TestCtlTimeoutLeavesNoCLI). fqueues does the same.
fctl() {
  local n="$1"
  shift
  timeout --kill-after=5 "$ctl_timeout" chroot "$root" env HOME=/var/lib/rabbitmq \
    ERL_EPMD_PORT="$epmd_port" RABBITMQ_USE_LONGNAME=true \
    /usr/lib/rabbitmq/bin/rabbitmqctl -q --longnames -n "$(name "$n")" "$@"
}

running() { fctl "$1" status >/dev/null 2>&1; }

field_env() {
  local n="$1" d="$fbase/$1"
  echo "HOME=/var/lib/rabbitmq"
  echo "RABBITMQ_CONF_ENV_FILE=$d/rabbitmq-env.conf"
  echo "RABBITMQ_USE_LONGNAME=true"
  echo "RABBITMQ_NODENAME=$(name "$n")"
  echo "RABBITMQ_NODE_IP_ADDRESS=$(addr "$n")"
  echo "RABBITMQ_NODE_PORT=$(port "$n")"
  echo "RABBITMQ_DIST_PORT=$(dport "$n")"
  echo "RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf"
  echo "RABBITMQ_ADVANCED_CONFIG_FILE=$d/advanced.config"
  echo "RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins"
  echo "RABBITMQ_MNESIA_BASE=$d/mnesia"
  echo "RABBITMQ_LOG_BASE=$d/log"
  echo "RABBITMQ_PID_FILE=$d/$n.pid"
  echo "ERL_EPMD_PORT=$epmd_port"
  echo "ERL_EPMD_ADDRESS=$epmd_addrs"
}

prepare() {
  local n="$1" d="$root$fbase/$1"
  mkdir -p "$d/mnesia" "$d/log"
  field_env "$n" | grep -v '^HOME=' | sed -e 's/^RABBITMQ_//' -e 's/^/export /' >"$d/rabbitmq-env.conf"
  cat >"$d/rabbitmq.conf" <<EOF
listeners.tcp.1 = $(addr "$n"):$(port "$n")
loopback_users = none
log.console = false
log.file.level = info
EOF
  cat >"$d/advanced.config" <<EOF
[{kernel, [{net_ticktime, $ticktime},
           {inet_dist_use_interface, $(erl_ip "$n")},
           {inet_dist_connect_options, [{ip, $(erl_ip "$n")}]}]},
 {rabbit, [{dead_letter_worker_publisher_confirm_timeout, $dlx_confirm_timeout}]}].
EOF
  echo "[]." >"$d/enabled_plugins"
}

# ---- epmd of the field's own ----------------------------------------------

epmd_pids() {
  local pid
  for pid in $(pgrep -x epmd || true); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$root" ] || continue
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-port $epmd_port" ||
      tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "ERL_EPMD_PORT=$epmd_port"; then
      echo "$pid"
    fi
  done
}
epmd_up() {
  answers "$epmd_port" && return 0
  chroot "$root" epmd -daemon -port "$epmd_port" -address "$epmd_addrs"
  for _ in $(seq 1 40); do answers "$epmd_port" && return 0; sleep 0.25; done
  die "the field's epmd does not answer on 127.0.0.1:$epmd_port"
}

# ---- nodes -------------------------------------------------------------------

spawn() {
  local n="$1"
  local -a envs
  mapfile -t envs < <(field_env "$n")
  say "starting $(name "$n") (AMQP $(addr "$n"):$(port "$n"))"
  chroot "$root" env "${envs[@]}" rabbitmq-server -detached >&2
}

await() {
  local n="$1" deadline=$((SECONDS + start_timeout))
  until fctl "$n" await_startup --timeout 10 >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "$me: $(name "$n") did not start within ${start_timeout}s; its log:" >&2
      tail -n 40 "$root$fbase/$n/log/$(name "$n").log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 1
  done
}

step() {
  local out
  if ! out="$(fctl "$@" 2>&1)"; then
    echo "$out" >&2
    echo "$me: rabbitmqctl -n $(name "$1") ${*:2} failed" >&2
    return 1
  fi
}

# running_nodes NODE: how many field nodes NODE sees running.
running_nodes() {
  fctl "$1" cluster_status --formatter json 2>/dev/null |
    grep -o '"running_nodes":\[[^]]*\]' | grep -o "f[0-9]@${net//./\\.}\\.2[0-9]" | sort -u | wc -l
}

pid_of() {
  use "$1"
  node_pid
}

# ---- PostgreSQL of the field's own ---------------------------------------------

pgbin=/usr/lib/postgresql/15/bin
as_pg() { runuser -u postgres -- "$@"; }
pg_ready() { "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" 2>/dev/null; }
pg_start() {
  [ -d "$pgdir/data" ] || die "the field's PostgreSQL was never set up (run: $0 up)"
  pg_ready && return 0
  # A killed postmaster leaves its pid file; pg_ctl copes with a stale one.
  as_pg timeout 90 "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w -t 60 start >/dev/null ||
    { tail -n 20 "$pgdir/log" >&2; die "the field's PostgreSQL did not start"; }
}
pg_up() {
  command -v runuser >/dev/null || die "runuser is missing"
  [ -x "$pgbin/initdb" ] || die "PostgreSQL 15 is not installed ($pgbin/initdb)"
  if [ ! -d "$pgdir/data" ]; then
    say "initdb of the field's PostgreSQL in $pgdir (port $pg_port)"
    mkdir -p "$pgdir"
    chown postgres:postgres "$pgdir"
    as_pg "$pgbin/initdb" -D "$pgdir/data" -U postgres --auth=trust -E UTF8 >/dev/null
    # fsync off: the field kills PostgreSQL's processes, never the machine,
    # and a killed process loses nothing the kernel already has.
    cat >>"$pgdir/data/postgresql.conf" <<EOF
port = $pg_port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$pgdir'
fsync = off
max_connections = 200
EOF
  fi
  pg_start
  if ! as_pg "$pgbin/psql" -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'field'" | grep -q 1; then
    as_pg "$pgbin/psql" -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qc "CREATE DATABASE field"
  fi
}
pg_pids() {
  local pm
  [ -f "$pgdir/data/postmaster.pid" ] || return 0
  pm="$(head -n 1 "$pgdir/data/postmaster.pid" 2>/dev/null || true)"
  [ -n "$pm" ] && [ -d "/proc/$pm" ] || return 0
  # Ours only: its command line names our data directory.
  tr '\0' ' ' <"/proc/$pm/cmdline" 2>/dev/null | grep -q -- "$pgdir/data" || return 0
  echo "$pm"
  pgrep -P "$pm" || true
}
pg_kill() {
  local pids
  pids="$(pg_pids)"
  [ -n "$pids" ] || die "the field's PostgreSQL is not running"
  say "killing the field's PostgreSQL with SIGKILL (pids $(echo $pids))"
  # shellcheck disable=SC2086
  kill -9 $pids 2>/dev/null || true
  # Until every process is gone (reaped, not a zombie): a postmaster that
  # still exists keeps the next start from taking the data directory.
  local pid
  for pid in $pids; do
    for _ in $(seq 1 80); do
      [ -d "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || break
      sleep 0.25
    done
  done
  for pid in $(pg_pids); do
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] || die "PostgreSQL process $pid outlived SIGKILL"
  done
}
pg_restart() {
  [ -d "$pgdir/data" ] || die "the field's PostgreSQL was never set up (run: $0 up)"
  pg_ready || { pg_start; return; }
  say "restarting the field's PostgreSQL (pg_ctl restart -m fast)"
  as_pg timeout 90 "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -m fast -w -t 60 restart >/dev/null ||
    { tail -n 20 "$pgdir/log" >&2; die "the field's PostgreSQL did not restart"; }
}
pg_down() {
  if [ -d "$pgdir/data" ]; then
    as_pg timeout 30 "$pgbin/pg_ctl" -D "$pgdir/data" -m immediate -w -t 20 stop >/dev/null 2>&1 || true
    local pids
    pids="$(pg_pids)"
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  fi
  rm -rf "$pgdir"
}

# ---- cuts ------------------------------------------------------------------------

need_nft() {
  command -v nft >/dev/null && return 0
  timeout 300 "$(dirname "$0")/apt-install.sh" "nft is missing: the field's cuts" nftables >&2 ||
    die "could not install nftables"
}

# All cut mutations hold this lock: faults overlap and run concurrently.
locked() {
  mkdir -p "$state"
  exec 9>"$state/lock"
  flock -w 30 9 || die "another field.sh holds $state/lock"
}

ensure_table() {
  nft list table $table >/dev/null 2>&1 && nft list chain $table out >/dev/null 2>&1 && return 0
  nft -f - <<EOF
table $table {
  chain out { type filter hook output priority 0; policy accept; }
}
EOF
}

group() { # "f1,f2" -> "f1 f2", each checked
  local g
  for g in ${1//,/ }; do node_arg "$g"; done
}

# add_cut DESC RULE...: add the rules, each tagged with a new cut id, and
# record the cut with the number of rules that must stay in place.
add_cut() {
  local desc="$1"
  shift
  locked
  need_nft
  ensure_table
  local id
  id="$(($(cat "$state/seq" 2>/dev/null || echo 0) + 1))"
  echo "$id" >"$state/seq"
  local rules="" r
  for r in "$@"; do rules+="add rule $table out $r comment \"cut-$id\""$'\n'; done
  nft -f - <<<"$rules" || die "nft refused the rules of $desc"
  echo "$id $# $desc" >>"$state/cuts"
  say "cut $id in place: $desc ($# rules)"
}

pair_rules() { # FROM-group TO-group: rules dropping every packet FROM -> TO
  local a b
  for a in $(group "$1"); do
    for b in $(group "$2"); do
      [ "$a" != "$b" ] || die "node $a is on both sides"
      echo "ip saddr $(addr "$a") ip daddr $(addr "$b") drop"
    done
  done
}

partition() {
  [ $# -eq 2 ] || die "usage: $0 partition G1 G2 (e.g. f1 f2,f3)"
  local -a rules
  mapfile -t rules < <(pair_rules "$1" "$2"; pair_rules "$2" "$1")
  add_cut "partition $1 $2" "${rules[@]}"
}

partition_oneway() {
  [ $# -eq 2 ] || die "usage: $0 partition-oneway FROM TO"
  local -a rules
  mapfile -t rules < <(pair_rules "$1" "$2")
  add_cut "partition-oneway $1 $2" "${rules[@]}"
}

isolate_clients() {
  local n
  n="$(node_arg "${1:-}")"
  add_cut "isolate-clients $n" \
    "ip daddr $(addr "$n") tcp dport $(port "$n") drop" \
    "ip saddr $(addr "$n") tcp sport $(port "$n") drop"
}

heal() {
  if [ ! -d "$state" ]; then # never up (or down): at most a table to remove
    ! { command -v nft >/dev/null && nft list table $table >/dev/null 2>&1; } || nft delete table $table
    return 0
  fi
  locked
  if command -v nft >/dev/null && nft list table $table >/dev/null 2>&1; then
    nft delete table $table
  fi
  : >"$state/cuts"
  say "healed: no cut in place"
}

# cut_ok: every recorded cut still has all its rules in the table.
cut_ok() {
  [ -s "$state/cuts" ] || return 0
  local listing id want desc have bad=0
  listing="$(nft list chain $table out 2>/dev/null || true)"
  while read -r id want desc; do
    have="$(grep -c "comment \"cut-$id\"" <<<"$listing" || true)"
    if [ "$have" -lt "$want" ]; then
      echo "$me: cut $id ($desc) has $have of its $want rules in place" >&2
      bad=1
    fi
  done <"$state/cuts"
  return "$bad"
}

# ---- netem -----------------------------------------------------------------------

# This machine's kernel has no sch_netem (nor prio): `tc qdisc add ... netem`
# answers "Specified qdisc kind is unknown". So the two things a slow, lossy
# link needs are built from what it has, for traffic to one node's address
# only (from clients and from the other nodes):
#   loss P%   an nftables rule `numgen random mod 100 < P drop` in a table of
#             its own (inet acemq_field_netem), so heal leaves it alone
#   rate R    an htb class of ours (root a5:, class a5:1N) that a u32 filter
#             sends that address to; unclassified traffic takes htb's direct
#             queue, unshaped
# Anything else (delay, jitter, duplicate...) goes to a netem qdisc under the
# node's htb class where the kernel has one, and fails loudly where not.
netem_table="inet acemq_field_netem$tsfx"
netem() {
  local n
  n="$(node_arg "${1:-}")"
  shift
  [ $# -gt 0 ] || die "usage: $0 netem fN [loss P%] [rate R] [other netem args]"
  local loss="" rate="" rest=()
  while [ $# -gt 0 ]; do
    case "$1" in
    loss)
      [[ "${2:-}" =~ ^([0-9]+)%?$ ]] || die "loss takes a whole percentage (got '${2:-}')"
      loss="${BASH_REMATCH[1]}"
      shift 2
      ;;
    rate)
      [ -n "${2:-}" ] || die "rate takes a rate (e.g. 1mbit)"
      rate="$2"
      shift 2
      ;;
    *)
      rest+=("$1")
      shift
      ;;
    esac
  done
  locked
  local a band=$((10 + 10 * inst + ${n#f}))
  a="$(addr "$n")"
  if [ -n "$loss" ]; then
    need_nft
    nft list table $netem_table >/dev/null 2>&1 || nft -f - <<EOF
table $netem_table {
  chain out { type filter hook output priority 0; policy accept; }
}
EOF
    local h
    for h in $(nft -a list chain $netem_table out | grep "comment \"netem-$n\"" | grep -o 'handle [0-9]*' | cut -d' ' -f2); do
      nft delete rule $netem_table out handle "$h"
    done
    nft add rule $netem_table out ip daddr "$a" numgen random mod 100 "<" "$loss" drop comment "\"netem-$n\""
  fi
  if [ -n "$rate" ] || [ ${#rest[@]} -gt 0 ]; then
    local root_q
    root_q="$(tc qdisc show dev lo | grep ' root' | head -n 1)"
    case "$root_q" in
    "qdisc htb $tc_handle: root"*) ;;
    "qdisc noqueue 0: root"* | "")
      tc qdisc add dev lo root handle "$tc_handle:" htb default 0
      ;;
    *) die "lo has a root qdisc that is not the field's ($root_q); not touching it" ;;
    esac
    if tc class show dev lo | grep -q "class htb $tc_handle:$band "; then
      tc class change dev lo parent "$tc_handle:" classid "$tc_handle:$band" htb rate "${rate:-10gbit}"
    else
      tc class add dev lo parent "$tc_handle:" classid "$tc_handle:$band" htb rate "${rate:-10gbit}"
      tc filter add dev lo parent "$tc_handle:" protocol ip prio "$band" u32 \
        match ip dst "$a/32" flowid "$tc_handle:$band"
    fi
    if [ ${#rest[@]} -gt 0 ]; then
      tc qdisc replace dev lo parent "$tc_handle:$band" handle "$band:" netem "${rest[@]}" ||
        die "this kernel has no netem qdisc for '${rest[*]}'; only 'loss P%' and 'rate R' can be had here"
    fi
  fi
  echo "$n loss=${loss:-0}% rate=${rate:-unlimited} ${rest[*]}" >>"$state/netem"
  say "netem on traffic to $n: loss ${loss:-0}%, rate ${rate:-unlimited}${rest:+, ${rest[*]}}"
}

netem_clear() {
  if command -v nft >/dev/null && nft list table $netem_table >/dev/null 2>&1; then
    nft delete table $netem_table
  fi
  # Our classes and filters only; the root goes with the last class (another
  # instance may have its own under it).
  if tc qdisc show dev lo 2>/dev/null | grep -q "qdisc htb $tc_handle: root"; then
    local n band
    for n in "${nodes[@]}"; do
      band=$((10 + 10 * inst + ${n#f}))
      tc filter del dev lo parent "$tc_handle:" prio "$band" 2>/dev/null || true
      tc class del dev lo classid "$tc_handle:$band" 2>/dev/null || true
    done
    tc class show dev lo | grep -q "class htb $tc_handle:" || tc qdisc del dev lo root
  fi
  rm -f "$state/netem"
}

# ---- commands --------------------------------------------------------------------

all_up() {
  local n
  for n in "${nodes[@]}"; do running "$n" || return 1; done
  [ "$(running_nodes f1)" = 3 ] && pg_ready
}

up() {
  if [ -d "$root$fbase" ] && all_up 2>/dev/null; then
    say "already up"
    return 0
  fi
  chroot "$root" sh -c "command -v rabbitmq-server" >/dev/null ||
    die "no RabbitMQ in $root (run: scripts/broker.sh up 4.3)"
  mountpoint -q "$root/proc" || { say "mounting /proc and /dev in $root (broker.sh up 4.3)"; "$(dirname "$0")/broker.sh" up 4.3 >&2; }
  need_nft
  if [ -e "$root$fbase" ] || [ -e "$pgdir" ] || [ -e "$state" ]; then
    say "removing the leftovers of an earlier run"
    down
  fi
  local n
  for n in "${nodes[@]}"; do
    if (exec 3<>"/dev/tcp/$(addr "$n")/$(port "$n")") 2>/dev/null; then
      die "$(addr "$n"):$(port "$n") is taken"
    fi
  done
  up_ok=0
  trap '[ "${up_ok:-0}" = 1 ] || { echo "$me: up failed; tearing down" >&2; down || true; }' EXIT
  trap 'exit 130' INT TERM
  local t0=$SECONDS
  mkdir -p "$root$fbase" "$state"
  for n in "${nodes[@]}"; do prepare "$n"; done
  chroot "$root" chown -R rabbitmq:rabbitmq "$fbase"
  chmod 755 "$root$fbase"
  : >"$state/cuts"
  epmd_up
  pg_up &
  local pgjob=$!
  for n in "${nodes[@]}"; do spawn "$n"; done
  for n in "${nodes[@]}"; do await "$n"; done
  for n in f2 f3; do
    say "joining $(name "$n") to $(name f1)"
    step "$n" stop_app
    step "$n" reset
    step "$n" join_cluster "$(name f1)"
    step "$n" start_app
    await "$n"
  done
  local deadline=$((SECONDS + start_timeout))
  until [ "$(running_nodes f1)" = 3 ]; do
    if ((SECONDS >= deadline)); then
      fctl f1 cluster_status >&2 || true
      die "cluster_status does not show 3 running nodes within ${start_timeout}s"
    fi
    sleep 1
  done
  wait "$pgjob" || die "the field's PostgreSQL did not come up"
  up_ok=1
  say "up in $((SECONDS - t0))s: f1-f3 on $(urls), net_ticktime ${ticktime}s, PostgreSQL on 127.0.0.1:$pg_port"
}

down() {
  local n pid
  # Cuts and netem first, so nothing outlives a failed teardown of the rest.
  if command -v nft >/dev/null && nft list table $table >/dev/null 2>&1; then
    nft delete table $table || echo "$me: could not delete table $table" >&2
  fi
  netem_clear || echo "$me: could not remove the netem qdisc from lo" >&2
  for n in "${nodes[@]}"; do
    pid="$(pid_of "$n")"
    if [ -n "$pid" ]; then
      say "killing $(name "$n") (pid $pid)"
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  for pid in $(epmd_pids); do kill "$pid" 2>/dev/null || true; done
  pg_down
  # The nodes' child processes (erl_child_setup, inet_gethost) end with them.
  for _ in $(seq 1 20); do
    local left=""
    for n in "${nodes[@]}"; do left+="$(pid_of "$n")"; done
    [ -z "$left" ] && break
    sleep 0.25
  done
  rm -rf "${root:?}$fbase" "$state"
  return 0
}

urls() {
  local n u=()
  for n in "${nodes[@]}"; do u+=("amqp://guest:guest@$(addr "$n"):$(port "$n")/"); done
  (IFS=,; echo "${u[*]}")
}

kill_node() {
  local n pid
  n="$(node_arg "${1:-}")"
  pid="$(pid_of "$n")"
  [ -n "$pid" ] || die "$(name "$n") is not running"
  say "killing $(name "$n") (pid $pid) with SIGKILL"
  kill -9 "$pid"
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
  die "$(name "$n") (pid $pid) is still there 10s after SIGKILL"
}

start_node() {
  local n
  n="$(node_arg "${1:-}")"
  [ -d "$root$fbase/$n" ] || die "$(name "$n") was never set up (run: $0 up)"
  epmd_up
  if [ -n "$(pid_of "$n")" ] && [ "$(running_nodes "$n")" = 3 ]; then
    say "$(name "$n") is up"
    return 0 # already in the whole cluster: one call, not three (Run's final heal starts every node)
  fi
  if [ -z "$(pid_of "$n")" ]; then
    spawn "$n"
  elif ! fctl "$n" await_startup --timeout 5 >/dev/null 2>&1; then
    step "$n" start_app
  fi
  await "$n" || die "$(name "$n") did not start"
  # In the cluster: it sees itself and at least one other node running (a
  # partition in force may keep it from seeing both).
  local deadline=$((SECONDS + 60))
  until [ "$(running_nodes "$n")" -ge 2 ]; do
    ((SECONDS < deadline)) || die "$(name "$n") runs but sees no other node within 60s"
    sleep 1
  done
  say "$(name "$n") is up"
}

stop_node() {
  local n pid
  n="$(node_arg "${1:-}")"
  pid="$(pid_of "$n")"
  [ -n "$pid" ] || die "$(name "$n") is not running"
  say "stopping $(name "$n")"
  fctl "$n" stop >/dev/null 2>&1 || say "rabbitmqctl stop $(name "$n") failed; killing it"
  for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
}

# fqueues NODE ARGS...: rabbitmq-queues against a field node, bounded.
fqueues() {
  local n="$1"
  shift
  timeout --kill-after=5 "$ctl_timeout" chroot "$root" env HOME=/var/lib/rabbitmq \
    ERL_EPMD_PORT="$epmd_port" RABBITMQ_USE_LONGNAME=true \
    /usr/lib/rabbitmq/bin/rabbitmq-queues -q --longnames -n "$(name "$n")" "$@"
}

# leader: the member that says it leads, from quorum_status (which asks only
# that queue's members: list_queues waits for every queue, 60 s and more on
# a loaded or partitioned cluster). A queue that is unknown or has no
# leader right now prints nothing.
leader() {
  local q="${1:-}" vhost="${2:-/}" n out err
  [ -n "$q" ] || die "usage: $0 leader QUEUE [VHOST]"
  for n in "${nodes[@]}"; do
    running "$n" || continue
    if out="$(ctl_timeout=20 fqueues "$n" quorum_status -p "$vhost" "$q" --formatter json 2>&1)"; then
      grep '"Raft State":"leader"' <<<"$out" | grep -o '"Node Name":"f[0-9]' | cut -d'"' -f4 | head -n 1
      return 0
    fi
    err="$out"
    # Not found is an answer; a timeout or a node down is not.
    if grep -qi 'not.found\|does not exist\|not_found' <<<"$out"; then
      return 0
    fi
  done
  die "no node answered quorum_status $q: ${err:-no node running}"
}

# queue_places TYPE PREFIX: "QUEUE fN" for each queue of TYPE (classic,
# quorum, or all) whose name starts with PREFIX, and the node it lives on
# (a classic queue's only node, a quorum queue's leader), as the queue's
# record in the metadata store names it. Not list_queues: it asks every
# queue's process and waits out those that do not answer; a minute after a
# partition healed it twice gave no quorum row within 40 s, and the rung
# watch then never saw the home queue's leader move (seed 256319273). Every
# node is asked at once (one rabbitmqctl eval each, bounded by
# FIELD_CTL_TIMEOUT; no `running` probe first, it would double the time on
# a loaded machine), and each queue goes to the node most answers name: a
# node cut off from the others may still name itself.
queue_places_erl='lists:foreach(fun(Q) -> {resource, _, queue, N} = amqqueue:get_name(Q), T = case amqqueue:get_type(Q) of rabbit_quorum_queue -> quorum; rabbit_classic_queue -> classic; _ -> other end, Nd = case amqqueue:get_pid(Q) of {_, X} -> X; P when is_pid(P) -> node(P); _ -> none end, io:format("~s ~s ~s~n", [N, T, Nd]) end, rabbit_amqqueue:list()).'
queue_places() {
  local type="$1" p="${2:-}" n tmp rc=0
  tmp="$(mktemp -d)"
  for n in "${nodes[@]}"; do
    (fctl "$n" eval "$queue_places_erl" >"$tmp/$n" 2>/dev/null || true) &
  done
  wait
  awk -v p="$p" -v type="$type" 'NF == 3 && index($1, p) == 1 && (type == "all" || $2 == type) && $3 ~ /^f[0-9]@/ {
      split($3, a, "@"); k = $1 " " a[1]
      if (!(k in votes)) order[++n] = k
      votes[k]++
    }
    END {
      for (i = 1; i <= n; i++) {
        split(order[i], x, " ")
        if (votes[order[i]] > best[x[1]]) { best[x[1]] = votes[order[i]]; pick[x[1]] = x[2] }
      }
      for (q in pick) { print q, pick[q]; found = 1 }
      exit !found
    }' "$tmp"/f* || rc=1
  rm -rf "$tmp"
  return $rc
}

# queue-nodes PREFIX: "QUEUE fN" for each queue named PREFIX…: its node
# (the rung watch).
queue_nodes() {
  queue_places all "${1:-}" || die "no node listed a queue named ${1:-}…"
}

# quorum-leaders: "QUEUE fN" for each quorum queue: its leader (for the
# fault partition-leader).
quorum_leaders() {
  queue_places quorum "" || die "no node listed a quorum queue with a leader"
}

# ctl ARGS...: rabbitmqctl ARGS against the first node that is running
# (bounded, quiet: a leading -q is dropped, fctl passes its own).
ctl() {
  local n
  [ "${1:-}" != -q ] || shift
  for n in "${nodes[@]}"; do
    if running "$n"; then
      fctl "$n" "$@"
      return
    fi
  done
  die "no field node is running"
}

# dlx_timeouts: "fN MS" for each running node: the dead-letter worker's
# confirm timeout as the node's rabbit application has it.
dlx_timeouts() {
  local n v
  for n in "${nodes[@]}"; do
    running "$n" || continue
    v="$(fctl "$n" eval 'application:get_env(rabbit, dead_letter_worker_publisher_confirm_timeout).' 2>/dev/null)" || continue
    echo "$n $(grep -o '[0-9][0-9]*' <<<"$v" | head -n 1)"
  done
}

status() {
  local n pid
  for n in "${nodes[@]}"; do
    pid="$(pid_of "$n")"
    if [ -z "$pid" ]; then
      echo "$(name "$n"): not running"
    elif running "$n"; then
      echo "$(name "$n"): running (pid $pid), sees $(running_nodes "$n") running nodes"
    else
      echo "$(name "$n"): VM $pid does not answer rabbitmqctl"
    fi
  done
  if pg_ready; then echo "postgresql 127.0.0.1:$pg_port: running"; else echo "postgresql 127.0.0.1:$pg_port: not running"; fi
  if [ -s "$state/cuts" ]; then
    echo "cuts in force:"
    sed 's/^/  /' "$state/cuts"
    if cut_ok 2>/dev/null; then echo "  (all in place)"; else echo "  (SOME RULES ARE MISSING)"; fi
  else
    echo "cuts in force: none"
  fi
  if [ -s "$state/netem" ]; then
    echo "netem:"
    sed 's/^/  /' "$state/netem"
  fi
  return 0
}

need_up() { [ -d "$root$fbase" ] || die "the field is not up (run: $0 up)"; }

cmd="${1:-}"
[ $# -eq 0 ] || shift
case "$cmd" in
up) up ;;
down) down ;;
urls) urls ;;
pg-url) echo "postgres://postgres@127.0.0.1:$pg_port/field?sslmode=disable" ;;
partition) need_up; partition "$@" ;;
partition-oneway) need_up; partition_oneway "$@" ;;
isolate-clients) need_up; isolate_clients "$@" ;;
heal) heal ;;
cut-ok) cut_ok ;;
netem) need_up; netem "$@" ;;
netem-clear) netem_clear ;;
kill) need_up; kill_node "$@" ;;
start) need_up; start_node "$@" ;;
stop) need_up; stop_node "$@" ;;
restart) need_up; stop_node "$@"; start_node "$@" ;;
pg-kill) pg_kill ;;
pg-start) pg_start ;;
pg-restart) pg_restart ;;
leader) need_up; leader "$@" ;;
queue-nodes) need_up; queue_nodes "$@" ;;
quorum-leaders) need_up; quorum_leaders ;;
ctl) need_up; ctl "$@" ;;
dlx-confirm-timeout) need_up; dlx_timeouts ;;
status) status ;;
*) die "usage: $0 up|down|urls|pg-url|partition G1 G2|partition-oneway FROM TO|isolate-clients fN|heal|cut-ok|netem fN ARGS|netem-clear|kill fN|start fN|stop fN|restart fN|pg-kill|pg-start|pg-restart|leader QUEUE|queue-nodes PREFIX|quorum-leaders|ctl ARGS|dlx-confirm-timeout|status" ;;
esac
