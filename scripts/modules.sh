#!/usr/bin/env bash
# The repository's Go modules. The core (github.com/acemq/acemq-go) is at the
# root; cmd/acemq (the CLI: kong, progressbar), outbox (pgx), examples,
# integration (chromedp) and internal/cmd are modules of their own, so that
# a service importing the core does not get their dependencies. go.work joins
# them for development; nothing here needs a published version of our own
# modules.
#
#   scripts/modules.sh list             every module's directory
#   scripts/modules.sh tidy             `go mod tidy` in every module
#   scripts/modules.sh release vX.Y.Z   tag a release: the core at HEAD, then a
#                                       commit in which outbox and cmd/acemq
#                                       require it, tagged outbox/vX.Y.Z and
#                                       cmd/acemq/vX.Y.Z (push the three tags)
#   scripts/modules.sh check            every module tidy; then prove what a
#                                       user does, from a copy of this work
#                                       tree released as v0.999.0 in
#                                       a temporary directory and served by
#                                       git (no proxy for our modules):
#                                       `go install …/cmd/acemq@latest`,
#                                       `go get …/outbox@latest`, and a core-only
#                                       module whose `go list -m all` holds
#                                       none of chromedp, kong, progressbar, pgx,
#                                       lib/pq (the outbox's: none but pgx)
#
# The published modules (outbox, cmd/acemq) carry no replace directive:
# `go install pkg@version` refuses a go.mod that has one. Until the first
# release they require the core at the placeholder
# v0.0.0-00010101000000-000000000000, then at the last release; go.work
# stands in for it in development, and `release` sets the new one. The others
# (examples, integration, internal/cmd) are never required by anyone and keep
# replace directives to the checkout, so they also build with GOWORK=off.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export GOWORK="$root/go.work"

core=github.com/acemq/acemq-go
published=(outbox cmd/acemq)
heavy='^(github\.com/chromedp/|github\.com/alecthomas/kong|github\.com/schollz/progressbar|github\.com/jackc/pgx|github\.com/lib/pq)'

modules() { go list -m -f '{{.Dir}}' | sed "s#^$root#.#"; }

# relative path from module directory $1 to the root
up() { local d=$1 r=.; [ "$d" = . ] || r=$(echo "${d#./}" | sed 's#[^/][^/]*#..#g'); echo "$r"; }

tidy() {
  local d o rel args keep
  for d in $(modules); do
    rel=$(up "$d")
    echo "== go mod tidy in $d"
    if [ "$d" = . ]; then (GOWORK=off go mod tidy); continue; fi
    # Every other module of the workspace replaced by its directory for the
    # tidy; afterwards a published module keeps no replace, the others keep
    # those of the modules they require.
    args=()
    for o in $(modules); do
      [ "$o" = "$d" ] && continue
      args+=("-replace=$core${o#.}=$rel${o#.}")
    done
    (cd "$d" && go mod edit "${args[@]}" && GOWORK=off GOFLAGS=-mod=mod go mod tidy)
    for o in $(modules); do
      [ "$o" = "$d" ] && continue
      # a Require entry: "Path": "…", (a Replace's Old has no comma)
      keep=$(cd "$d" && go mod edit -json | grep -c "\"Path\": \"$core${o#.}\"," || true)
      case " ${published[*]} " in *" ${d#./} "*) keep=0 ;; esac
      [ "$keep" = 0 ] && (cd "$d" && go mod edit -dropreplace="$core${o#.}")
    done
  done
}

# git_env DIR: make https://github.com/acemq/acemq-go resolve to the git
# repository DIR for the go command (GOPRIVATE: no proxy, no checksum
# database for our modules; everything else from the local module cache's
# downloads first, then GOPROXY).
git_env() {
  local repo=$1 tmp=$2
  cat >"$tmp/gitconfig" <<EOF
[url "$repo"]
	insteadOf = https://github.com/acemq/acemq-go
[user]
	name = modules.sh
	email = modules.sh@localhost
EOF
  export GIT_CONFIG_GLOBAL="$tmp/gitconfig" GOPRIVATE="$core" GONOSUMDB="$core"
  export GOPROXY="file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)"
  export GOMODCACHE="${MODULES_SH_CACHE:-$tmp/modcache}" GOFLAGS=-mod=mod GOWORK=off
}

release() {
  local v=$1 d
  [[ $v =~ ^v[01]\.[0-9]+\.[0-9]+$ ]] || { echo "release: want vX.Y.Z with X 0 or 1, got $v" >&2; exit 2; }
  [ -z "$(git status --porcelain)" ] || { echo "release: the work tree is not clean" >&2; exit 1; }
  git tag "$v"
  release_tmp=$(mktemp -d)
  (
    trap 'chmod -R u+w "$release_tmp" 2>/dev/null; rm -rf "$release_tmp"' EXIT
    git_env "$root" "$release_tmp"
    for d in "${published[@]}"; do
      (cd "$d" && go mod edit -require="$core@$v" && go mod tidy)
    done
  )
  git add "${published[@]/%//go.mod}" "${published[@]/%//go.sum}"
  git commit -q -m "release $v: outbox and cmd/acemq require the core at $v"
  for d in "${published[@]}"; do git tag "$d/$v"; done
  echo "tagged $v (core), ${published[*]/%//$v}; push them: git push origin $v ${published[*]/%//$v} HEAD"
}

check() {
  local out n v=v0.999.0
  check_tmp=$(mktemp -d)
  trap 'chmod -R u+w "$check_tmp" 2>/dev/null; rm -rf "$check_tmp"' EXIT
  local tmp=$check_tmp
  # The go command's progress lines say nothing here.
  exec 2> >(grep --line-buffered -v -E '^go: (downloading|added|upgraded|finding|found) ' >&2)
  # A copy of the work tree as it is (tracked and new files), committed
  # and released as $v by this script's release.
  mkdir "$tmp/repo"
  git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$tmp/repo"
  (
    cd "$tmp/repo"
    export GIT_AUTHOR_NAME=check GIT_AUTHOR_EMAIL=check@localhost GIT_COMMITTER_NAME=check GIT_COMMITTER_EMAIL=check@localhost
    export MODULES_SH_CACHE="$tmp/modcache"
    git init -q && git add -A && git commit -q -m "work tree"
    echo "== every module tidy (a package may build in the workspace with a requirement its own go.mod lacks)"
    ./scripts/modules.sh tidy >/dev/null
    git diff --exit-code --stat -- '*go.mod' '*go.sum' || { echo "FAIL: go.mod/go.sum above not tidy; run scripts/modules.sh tidy" >&2; exit 1; }
    echo "   tidy"
    ./scripts/modules.sh release "$v" >/dev/null
  )
  git_env "$tmp/repo" "$tmp"
  export GOBIN="$tmp/bin"

  echo "== go install $core/cmd/acemq@latest"
  (cd "$tmp" && go install "$core/cmd/acemq@latest")
  "$tmp/bin/acemq" --help >/dev/null
  echo "   installed; acemq --help runs"

  mkdir -p "$tmp/core" "$tmp/outbox"
  printf 'package main\n\nimport (\n\t_ "%s/mq"\n\t_ "%s/topology"\n\t_ "%s/middleware"\n\t_ "%s/retry"\n)\n\nfunc main() {}\n' \
    $core $core $core $core >"$tmp/core/main.go"
  printf 'package main\n\nimport (\n\t_ "%s/mq"\n\t_ "%s/outbox"\n)\n\nfunc main() {}\n' $core $core >"$tmp/outbox/main.go"

  echo "== go get $core@latest: a module importing mq, topology, middleware, retry"
  (cd "$tmp/core" && go mod init example.com/core >/dev/null 2>&1 && go get "$core@latest" && go mod tidy && go build -o /dev/null .)
  out=$(cd "$tmp/core" && go list -m -f '{{.Path}}' all)
  n=$(echo "$out" | wc -l)
  echo "   $n modules in go list -m all"
  if echo "$out" | grep -E "$heavy"; then echo "FAIL: the core's build list holds the modules above" >&2; exit 1; fi

  echo "== go get $core/outbox@latest: a module importing mq and outbox"
  (cd "$tmp/outbox" && go mod init example.com/outbox >/dev/null 2>&1 && go get "$core/outbox@latest" && go mod tidy && go build -o /dev/null .)
  out=$(cd "$tmp/outbox" && go list -m all)
  echo "   $(echo "$out" | wc -l) modules in go list -m all; $(echo "$out" | grep -E "^$core(/outbox)? " | tr '\n' ';')"
  echo "$out" | grep -q '^github.com/jackc/pgx/v5 ' || { echo "FAIL: the outbox's build list lacks pgx" >&2; exit 1; }
  # lib/pq is a test dependency of the integration module alone.
  if echo "$out" | grep -E '^(github\.com/chromedp/|github\.com/alecthomas/kong|github\.com/schollz/progressbar|github\.com/lib/pq)'; then
    echo "FAIL: the outbox's build list holds the modules above" >&2; exit 1
  fi
  echo "MODULES core=$n: go install cmd/acemq@latest, go get outbox@latest, core without chromedp/kong/progressbar/pgx/lib/pq: ok"
}

case "${1:-}" in
  list) modules ;;
  tidy) tidy ;;
  release) release "${2:?release: which version (vX.Y.Z)?}" ;;
  check) check ;;
  *) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
