#!/bin/sh
# apt-install.sh WHY PACKAGE...: the one way the Makefile and the scripts
# install Debian packages. It installs those of PACKAGE... that are not
# installed yet, without their recommends (apt-get --no-install-recommends)
# and without upgrading a package already installed (--no-upgrade), and says
# first what it will install: each package, how many, the download and the
# disk space, simulated with apt-get -s.
#
# A package to install may need a newer version of one already installed (a
# library, systemd's libsystemd0); apt would upgrade it on the way, which
# --no-upgrade does not stop. Those upgrades are printed, each with its old
# and new version, before anything is installed: `make test` upgrading
# system packages without saying so is what issue 39 found (eleven,
# systemd among them, all pulled in by recommends, which are left out
# now). They are made, so that `make test` works on a fresh machine; run
# with ACEMQ_APT_DRY_RUN=1 first to see the plan.
#
# WHY is printed with the plan ("for the console's browser tests").
# ACEMQ_APT_DRY_RUN=1 prints the plan and installs nothing. Runs apt-get
# through sudo when not root. Exit 0: all installed (or, dry, planned).
set -eu

say() { echo "apt-install: $*" >&2; }
die() {
  say "$*"
  exit 1
}
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

[ $# -ge 2 ] || die "usage: apt-install.sh WHY PACKAGE..."
why="$1"
shift

missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
[ -n "$missing" ] || exit 0

as_root apt-get update -qq
# shellcheck disable=SC2086 # $missing is a list of package names
plan="$(apt-get -s install --no-install-recommends --no-upgrade $missing)" ||
  die "apt-get cannot install$missing: $plan"

# Inst NAME (NEW-VERSION …) is a new package; Inst NAME [OLD] (NEW …) an
# upgrade of an installed one.
new="$(echo "$plan" | awk '/^Inst [^ ]+ \(/ {print $2}')"
upgrades="$(echo "$plan" | awk '/^Inst [^ ]+ \[/ {print $2 " " $3 " -> " substr($4, 2)}')"
n="$(echo "$new" | grep -c . || true)"
# Sizes from the archive's index: Size is the .deb, Installed-Size KiB.
# shellcheck disable=SC2086
sizes="$(if [ -n "$new" ]; then apt-cache show --no-all-versions $new; fi |
  awk '/^Size:/ {d += $2} /^Installed-Size:/ {i += $2} END {printf "%.0f MB download, %.0f MB on disk", d / 1e6, i / 1024}')"
say "installing$missing ($why), without recommends: $n new packages, $sizes:"
echo "$new" | tr '\n' ' ' | fold -s -w 76 | sed 's/^/  /' >&2
echo >&2
if [ -n "$upgrades" ]; then
  say "and upgrading these installed packages, which$missing needs newer:"
  echo "$upgrades" | sed 's/^/  /' >&2
fi
[ "${ACEMQ_APT_DRY_RUN:-}" != 1 ] || exit 0

# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends --no-upgrade $missing
