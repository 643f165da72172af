#!/usr/bin/env bash
# Runs a command inside a fresh memory cgroup whose limit also charges the page cache, to show how
# a program behaves on a machine with that much memory:
#
#   scripts/with-memory-limit.sh 8G build/release/bin/redwing bench --model models/g4full --cold
#
# Sizes: bytes, or a number with K/M/G/T (powers of 1024; KiB/MiB/GiB/TiB and KB/MB/GB also
# mean powers of 1024), e.g. 512M, 4G, 1.5G.
#
# cgroup v2 (memory.max, plus memory.swap.max=0 and memory.oom.group=1) or the v1 memory
# controller (memory.limit_in_bytes, plus memory.memsw.limit_in_bytes = the same where swap
# accounting exists), whichever the machine has. Both charge page-cache pages a process in the
# cgroup reads; at the limit the kernel reclaims them first, and only anonymous memory beyond the
# limit ends in the OOM killer (the command then exits with 137).
#
# The command's exit status is passed through. The cgroup is removed afterwards (processes the
# command left in it are killed). A summary (peak usage, OOM kills) goes to stderr unless
# WITH_MEMORY_LIMIT_QUIET=1. Needs root (or a delegated, writable cgroup: set
# WITH_MEMORY_LIMIT_PARENT to its directory).
set -u

prog=with-memory-limit.sh
die() {
  echo "$prog: $*" >&2
  exit 125
}
say() {
  [[ "${WITH_MEMORY_LIMIT_QUIET:-0}" == 1 ]] || echo "$prog: $*" >&2
}

if [[ $# -lt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  echo "usage: $prog <size> <command> [args...]   (size: e.g. 8G, 512M, 4294967296)" >&2
  [[ $# -ge 1 && ( "$1" == "-h" || "$1" == "--help" ) ]] && exit 0
  exit 125
fi

# --- the size -------------------------------------------------------------------------------
parse_size() {
  local s="$1"
  if [[ ! "$s" =~ ^([0-9]+(\.[0-9]+)?)([KkMmGgTt]?)([iI]?[Bb]?)$ ]]; then
    return 1
  fi
  local num="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[3]}" mult=1
  case "$unit" in
    K | k) mult=1024 ;;
    M | m) mult=$((1024 ** 2)) ;;
    G | g) mult=$((1024 ** 3)) ;;
    T | t) mult=$((1024 ** 4)) ;;
  esac
  awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
}
limit=$(parse_size "$1") || die "bad size '$1' (expected e.g. 8G, 512M or a byte count)"
(( limit >= 4 * 1024 * 1024 )) || die "size '$1' is below 4 MiB; no program can run in that"
shift
human_bytes() {
  awk -v b="$1" 'BEGIN { if (b >= 1073741824) printf "%.2f GiB", b / 1073741824; else printf "%.1f MiB", b / 1048576 }'
}
human=$(human_bytes "$limit")

# --- find a memory cgroup hierarchy -----------------------------------------------------------
[[ -r /proc/self/mountinfo ]] || die "cannot read /proc/self/mountinfo (is /proc mounted?)"
# mountinfo: ... mount-point ... - fstype source super-options
v2_mnt=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup2") { print $5; exit } } }' /proc/self/mountinfo)
v1_mnt=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup" && ("," $(i+3) ",") ~ /,memory,/) { print $5; exit } } }' /proc/self/mountinfo)
[[ -n "$v2_mnt" || -n "$v1_mnt" ]] ||
  die "no cgroup filesystem is mounted (looked for cgroup2 and the v1 memory controller in /proc/self/mountinfo)"

version=0
if [[ -n "$v2_mnt" && -r "$v2_mnt/cgroup.controllers" ]] &&
  grep -qw memory "$v2_mnt/cgroup.controllers"; then
  version=2
elif [[ -n "$v1_mnt" ]]; then
  version=1
fi
if (( version == 0 )); then
  die "the memory controller is not available: cgroup2 at ${v2_mnt:-none} lists '$(cat "$v2_mnt/cgroup.controllers" 2>/dev/null)' and no v1 hierarchy has it (boot with cgroup_enable=memory?)"
fi

# The parent: $WITH_MEMORY_LIMIT_PARENT, else (v1) our own memory cgroup, else the hierarchy root.
# v2 uses the root: a non-root cgroup that holds processes cannot hand the memory controller to
# children.
if [[ -n "${WITH_MEMORY_LIMIT_PARENT:-}" ]]; then
  parent="$WITH_MEMORY_LIMIT_PARENT"
elif (( version == 2 )); then
  parent="$v2_mnt"
else
  own=$(awk -F: '{ n = split($2, c, ","); for (i = 1; i <= n; i++) if (c[i] == "memory") { print $3; exit } }' /proc/self/cgroup)
  parent="$v1_mnt${own%/}"
  [[ -d "$parent" && -w "$parent" ]] || parent="$v1_mnt"
fi
[[ -d "$parent" ]] || die "cgroup directory $parent does not exist"
if [[ ! -w "$parent" ]]; then
  if (( EUID != 0 )); then
    die "cannot create a cgroup under $parent: not root (run with sudo, or set WITH_MEMORY_LIMIT_PARENT to a delegated cgroup you own)"
  fi
  die "cannot create a cgroup under $parent: not writable (read-only cgroup filesystem, e.g. in a container?)"
fi
if (( version == 2 )); then
  if ! grep -qw memory "$parent/cgroup.subtree_control" 2>/dev/null; then
    echo +memory >"$parent/cgroup.subtree_control" 2>/dev/null ||
      die "cannot enable the memory controller in $parent/cgroup.subtree_control (does $parent hold processes? set WITH_MEMORY_LIMIT_PARENT to an empty cgroup)"
  fi
fi

cg="$parent/redwing-memlimit.$$"
err=$(mkdir "$cg" 2>&1) || die "cannot create cgroup $cg: ${err#mkdir: }"

peak_and_ooms() {
  local peak="" ooms=""
  if (( version == 2 )); then
    peak=$(cat "$cg/memory.peak" 2>/dev/null)
    ooms=$(awk '$1 == "oom_kill" { print $2 }' "$cg/memory.events" 2>/dev/null)
  else
    peak=$(cat "$cg/memory.max_usage_in_bytes" 2>/dev/null)
    ooms=$(awk '$1 == "oom_kill" { print $2 }' "$cg/memory.oom_control" 2>/dev/null)
  fi
  local msg=""
  [[ -n "$peak" ]] && msg="peak usage $(human_bytes "$peak") (page cache included)"
  [[ -n "$ooms" && "$ooms" != 0 ]] && msg="${msg:+$msg; }the OOM killer fired $ooms time(s)"
  echo "$msg"
}

# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
  [[ -d "$cg" ]] || return 0
  local procs_file="$cg/cgroup.procs" _
  # Processes the command left behind.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    [[ -s "$procs_file" ]] || break
    while read -r pid; do kill -KILL "$pid" 2>/dev/null; done <"$procs_file"
    sleep 0.1
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    rmdir "$cg" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "$prog: warning: could not remove cgroup $cg" >&2
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if (( version == 2 )); then
  echo "$limit" >"$cg/memory.max" || die "cannot set $cg/memory.max"
  swap="off"
  if [[ -e "$cg/memory.swap.max" ]]; then
    echo 0 >"$cg/memory.swap.max" 2>/dev/null || swap="not limited (memory.swap.max not writable)"
  else
    swap="not limited (no swap accounting)"
  fi
  [[ -e "$cg/memory.oom.group" ]] && echo 1 >"$cg/memory.oom.group" 2>/dev/null
else
  echo "$limit" >"$cg/memory.limit_in_bytes" || die "cannot set $cg/memory.limit_in_bytes"
  swap="off"
  if [[ -e "$cg/memory.memsw.limit_in_bytes" ]]; then
    echo "$limit" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null ||
      swap="not limited (memory.memsw.limit_in_bytes not writable)"
  else
    swap="not limited (no swap accounting)"
  fi
fi
say "cgroup v$version $cg: limit $human ($limit bytes, page cache included), swap $swap"

# Join the cgroup in a subshell, then become the command.
(
  echo "$BASHPID" >"$cg/cgroup.procs" || {
    echo "$prog: cannot move the command into $cg" >&2
    exit 125
  }
  exec "$@"
)
rc=$?
summary=$(peak_and_ooms)
say "command exited with status $rc${summary:+; $summary}"
exit "$rc"
