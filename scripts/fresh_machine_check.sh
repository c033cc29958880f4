#!/usr/bin/env bash
# Proves that the README's two commands work on a fresh Debian bookworm machine with
# nothing installed by hand, and that `pip install .` installs (or names) what it
# needs. Run by hand, as root, not in CI: it takes several minutes and a few GB.
#
# It builds a minimal bookworm root with debootstrap in a temporary folder, copies
# this checkout into it (tracked and untracked-but-not-ignored files: what a clone
# of the working tree would hold), and in a chroot runs, timed:
#   1. bash scripts/run.sh     (the README's main job)
#   2. bash scripts/test.sh    (the README's test command)
# and, in a second copy of the fresh root:
#   3. `pip install .` in a venv as a user without root or sudo: must fail and name
#      the missing Debian packages with the apt-get line to run;
#   4. the same `pip install .` as root: must install them and build; the module
#      then runs one GroupQueryAttention call.
# The network is the host's, which on the project's machines reaches only the
# package registries (Debian, PyPI), as on CI; the host's resolver, CA bundle and
# pip settings are copied in so that HTTPS to PyPI works as it does on the host.
#
# Usage: sudo bash scripts/fresh_machine_check.sh [--keep] [--only readme|pip]
#   --keep        leave the temporary folder (its path is printed) for inspection
#   --only X      run only the README commands (1, 2) or only the pip checks (3, 4)
# Env: KVSHARE_FRESH_DIR (parent of the temporary folder; default /var/tmp),
#      KVSHARE_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Exit status: 0 when every step passed, 1 otherwise (a summary table says which).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
keep=0 only=all
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --only) only=${2:?--only needs readme or pip}; shift ;;
    *) echo "usage: sudo bash scripts/fresh_machine_check.sh [--keep] [--only readme|pip]" >&2; exit 2 ;;
  esac
  shift
done
case $only in all | readme | pip) ;; *) echo "--only: expected readme or pip, got '$only'" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "fresh_machine_check: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "fresh_machine_check: installing debootstrap" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

mirror=${KVSHARE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$(mktemp -d "${KVSHARE_FRESH_DIR:-/var/tmp}/kvshare-fresh.XXXXXX")
mounted=()
cleanup() {
  local m
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if [ $keep = 1 ]; then echo "kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
log() { printf '[fresh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---- A fresh root --------------------------------------------------------------
log "debootstrap bookworm (minbase) into $work/base"
t0=$(date +%s)
debootstrap --variant=minbase bookworm "$work/base" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -20 "$work/debootstrap.log" >&2; exit 1; }
log "debootstrap took $(($(date +%s) - t0)) s"
# The same suites the project's machines use.
cat >"$work/base/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF
# The host's network settings (resolver, CA bundle for the egress proxy, pip config).
cp /etc/resolv.conf "$work/base/etc/resolv.conf"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$work/base/etc/ssl/certs" && cp /etc/ssl/certs/ca-certificates.crt "$work/base/etc/ssl/certs/"
fi
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$work/base/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$work/base/usr/local/share/ca-certificates/"
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$work/base/etc/pip.conf"
# A user without root or sudo, for the pip check.
chroot "$work/base" useradd -m -s /bin/bash newcomer

# The checkout as a clone of the working tree would hold it.
copy_checkout() {  # $1: destination inside a root
  mkdir -p "$1"
  (cd "$src" && git ls-files -z --cached --others --exclude-standard |
    tar --null --ignore-failed-read -cf - -T - 2>/dev/null) | tar -xf - -C "$1"
}

enter() {  # $1: root; prepares the mounts a build needs
  local r=$1
  mount -t proc proc "$r/proc" && mounted+=("$r/proc")
  mount --rbind /dev "$r/dev" && mount --make-rslave "$r/dev" && mounted+=("$r/dev")
  mount -t sysfs sys "$r/sys" && mounted+=("$r/sys")
}

# A clean login-like environment: only the host's proxy/pip settings pass.
run_in() {  # $1: root, $2: user, $3: command (bash -lc)
  local r=$1 user=$2 cmd=$3 home=/root
  [ "$user" = root ] || home=/home/$user
  local envs=(HOME="$home" USER="$user" LANG=C.UTF-8 TERM=dumb
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  local v
  for v in $(env | sed -n 's/^\(\(PIP\|HTTPS\?_PROXY\|https\?_proxy\|NO_PROXY\|no_proxy\)[A-Z_]*\)=.*/\1/p'); do
    [ "$v" = PIP_FIND_LINKS ] && continue  # a folder of the host's
    envs+=("$v=${!v}")
  done
  chroot --userspec="$user:$user" "$r" /usr/bin/env -i "${envs[@]}" bash -c "cd $home && $cmd"
}

results=()
step() {  # $1: label, $2: root, $3: user, $4: command, $5: expect (pass|fail), $6: must print (regex, optional)
  local label=$1 r=$2 user=$3 cmd=$4 expect=$5 want=${6:-} out="$work/$(echo "$1" | tr ' /.' '___').log"
  log "$label: $cmd"
  local t0 rc verdict
  t0=$(date +%s)
  set +e
  run_in "$r" "$user" "$cmd" 2>&1 | tee "$out" | sed 's/^/    | /' >&2
  rc=${PIPESTATUS[0]}
  set -e
  local secs=$(($(date +%s) - t0))
  if { [ "$expect" = pass ] && [ "$rc" = 0 ]; } || { [ "$expect" = fail ] && [ "$rc" != 0 ]; }; then verdict=PASS
  else verdict=FAIL; fi
  if [ -n "$want" ] && ! grep -Eq "$want" "$out"; then verdict=FAIL; log "$label: output lacks /$want/"; fi
  log "$label: $verdict (exit $rc, ${secs} s)"
  results+=("$(printf '%-4s  %5d s  exit %-3s  %s' "$verdict" "$secs" "$rc" "$label")")
}

if [ $only != pip ]; then
  readme=$work/readme
  cp -a "$work/base" "$readme"
  copy_checkout "$readme/root/kvshare"
  enter "$readme"
  log "README commands in $readme/root/kvshare"
  # The default run must print a continuation of the prompt (Berlin, as the model says).
  step "1 run.sh" "$readme" root "cd kvshare && bash scripts/run.sh" pass "Berlin"
  step "1 run.sh again (set-up already done)" "$readme" root "cd kvshare && time bash scripts/setup.sh run" pass
  step "2 test.sh" "$readme" root "cd kvshare && bash scripts/test.sh" pass "100% tests passed"
fi

if [ $only != readme ]; then
  pyroot=$work/pip
  cp -a "$work/base" "$pyroot"
  copy_checkout "$pyroot/home/newcomer/kvshare"
  chroot "$pyroot" chown -R newcomer:newcomer /home/newcomer/kvshare
  enter "$pyroot"
  # What a newcomer has before `pip install .`: Python with pip and venv.
  run_in "$pyroot" root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip python3-venv >/dev/null"
  run_in "$pyroot" newcomer "python3 -m venv venv"
  step "3 pip install . (no root)" "$pyroot" newcomer "venv/bin/pip install -q ./kvshare" fail \
    "sudo apt-get install -y --no-install-recommends .*libhwy-dev"
  run_in "$pyroot" root "python3 -m venv venv"
  step "4 pip install . (root)" "$pyroot" root \
    "cp -r /home/newcomer/kvshare kvshare && venv/bin/pip install -q ./kvshare && venv/bin/python -c \"import numpy as np, kvshare; q = np.ones((1, 2, 64), np.float32); print('kvshare ok', kvshare.group_query_attention(q, q, q, seqlens_k=[1], total_sequence_length=2, num_heads=1, kv_num_heads=1).output.shape)\"" \
    pass "kvshare ok"
fi

echo
echo "fresh_machine_check: Debian bookworm (debootstrap minbase), checkout $(cd "$src" && git describe --always --dirty)"
printf '%s\n' "${results[@]}"
for r in "${results[@]}"; do case $r in FAIL*) exit 1 ;; esac; done
exit 0
