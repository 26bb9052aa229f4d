#!/usr/bin/env bash
# bench.sh — agent-like workloads, run natively and through a rewindfs mount in the same run,
# on a fresh ext4 loop filesystem (docs/design.md §6; issues 2 item 6 and 6). A benchmark, not a
# test: it prints seconds and the ratio mount/native per workload. Runs as root.
#
# Usage:
#   scripts/bench.sh [--quick] [--only w1,w2] [--compare bindfs,fuse-overlayfs]
#                    [--native-only] [--markdown FILE] [--build]
#                    [--repeat N] [--boundaries[=loop|phase|off]] [--no-boundaries]
#                    [--boundary-ms N] [--mount-args "ARGS"]
#                    [--no-loop] [--requests]
#   scripts/bench.sh --travel [--quick] [--build] [--no-loop]
#
#   --travel           instead of the workloads below: show/ls of a checkpoint of a 20k-file
#                      tree, fork against cp -a, export/import against tar (scripts/bench-travel.sh)
#   --quick            smaller sizes for smoke tests (2k files, 1k edits, 64 MiB seq/random files)
#   --only LIST        run only these workloads (comma-separated; see the list below)
#   --compare LIST     also run the peers bindfs, fuse-overlayfs, passthrough_hp and/or
#                      nocapture, side by side, when installed (a peer that is not installed is noted and
#                      skipped). passthrough_hp is libfuse's own high-performance example
#                      daemon, a reference for what FUSE costs here with nothing saved: built
#                      from libfuse >= 3.18 with io_uring (docs/benchmarks.md, the ninth
#                      round), found as $PASSTHROUGH_HP or on the PATH, mounted with
#                      -o io_uring,default_permissions (as rewindfs: FUSE over io_uring, the
#                      kernel checking permissions). nocapture is rewindfs itself recording
#                      nothing: the same FUSE core and transport, built with the feature
#                      bench-nocapture and mounted with REWINDFS_BENCH_NOCAPTURE=1, so its
#                      column is what they cost and the gap to rewindfs is what capturing adds
#                      (found as $REWINDFS_NOCAPTURE_BIN, else target/bench-nocapture/release/
#                      rewindfs, built there with --build; never a build for use)
#   --native-only      skip the rewindfs runs (peers from --compare still run)
#   --markdown FILE    also write the table (with the run's settings) as markdown to FILE
#   --build            build target/release/rewindfs with `cargo build --release` if missing
#                      (and the nocapture peer's binary, if compared and missing)
#   --boundaries[=M]   checkpoint boundaries during the rewindfs runs (see below): loop (the
#                      default; bare --boundaries means loop), phase, or off
#   --no-boundaries    the same as --boundaries=off
#   --boundary-ms N    interval of the background boundary loop (default 100)
#   --mount-args ARGS  extra arguments for `rewindfs mount` (e.g. "--threads 1 --ttl 5"; rewindfs
#                      serves FUSE over io_uring by default: "--io-uring off" measures the
#                      /dev/fuse transport)
#   --repeat N         run each workload in N rounds, every target in turn in each, and report
#                      the median seconds and the median of the rounds' ratios (default 1)
#   --no-loop          use a plain directory instead of an ext4 loop mount
#   --requests         after the timed rounds, run each workload once more through rewindfs,
#                      untimed, counting the FUSE requests the kernel sends it (the
#                      fuse_request_send tracepoint: Linux >= 6.13, tracefs), and measure what one
#                      request costs a caller when the daemon answers it at once (statx with
#                      AT_STATX_FORCE_SYNC of one file, through the mount less natively). Adds
#                      the columns "requests" and "floor": native seconds + requests x that
#                      cost, as a ratio to native, what a FUSE filesystem that did nothing but
#                      the native work could reach on this kernel (see "Floors" below)
#
# Environment:
#   REWINDFS_BIN    the binary (default: <repo>/target/release/rewindfs)
#   BENCH_DIR       where the temporary directory is made (default: $TMPDIR or /tmp)
#   BENCH_IMG_SIZE  size of the sparse ext4 image (default: 16G; --repeat 2 of every workload with both
#                   peers fills 8G)
#
# Workloads (in run order; each is run for every target before the next workload starts):
#   extract       tar -xf of a synthetic source tree (20k files in 1000 dirs; quick: 2k/100)
#   git-commit    git add -A && git commit of that tree (git init is untimed)
#   git-status    git status ×10
#   grep          grep -r of a pattern in the tree (warm cache, like an agent's repeated grep)
#   edit-trunc    10k open(O_TRUNC)-write-close edits over 1000 files (one python process,
#                 timed inside it so interpreter start-up is not counted)
#   edit-rename   10k write-temp-then-rename edits over the same files
#   seq-write     dd bs=1M count=1024 conv=fsync (1 GiB; quick: 64 MiB)
#   seq-write-cache  the same without the fsync: the write into the page cache, the part a
#                 filesystem adds to (a `sync` after it is untimed). On a VM the disk's speed
#                 changes within seconds, and seq-write's fsync measures mostly that
#   seq-read      dd of that file to /dev/null, page cache dropped first (native and mounted)
#   overwrite-4k  capture cost: a 4 KiB overwrite in the middle of the 1 GiB file plus a
#                 4 KiB append; the "store delta" column shows what rewindfs stored for it
#   rand-write    10k 4 KiB pwrites at random aligned offsets in a 256 MiB file, no fsync
#                 (quick: 1k in 64 MiB)
#   rand-read     10k 4 KiB preads at random offsets in that file, page cache dropped first
#   rm-rf         rm -rf of the tree (including .git)
#   cargo-build   cargo build --offline of a generated dependency-free crate, with
#                 CARGO_TARGET_DIR inside the measured directory (skipped if cargo is missing):
#                 about 0.6 s, most of it cargo's and the linker's fixed costs
#   cargo-real    cargo build --offline --locked of a real dependency tree (scripts/bench-cargo:
#                 serde with its derive, serde_json and regex, locked: 16 packages), its target
#                 directory inside the measured directory; the crates are fetched from crates.io
#                 once per run, untimed, into a CARGO_HOME in $DATA, whose sources every target
#                 reads from there, as npm-install reads its npm cache (skipped, with a note, if
#                 cargo is missing or the registry cannot be reached)
#   stat-100k     find -printf of 100k empty files in 100 dirs, dentries and inodes dropped
#                 first (each stat'ed; the daemon then holds 100k inodes: its RSS after it is
#                 reported; quick: 10k)
#   rewind-300    the same for 300 files in 3 dirs, the size of an agent's bad turn (issue 33:
#                 at most 100 ms end to end, the CLI's process included)
#   rewind-10k    restoring 10k files changed since a checkpoint: rewindfs rewind --scope all,
#                 against native `rm -rf` + `cp -a` of a backup copy (quick: 1k)
#   npm-install   npm ci --offline of a real project (scripts/bench-npm: eslint 8.57.1, express
#                 4.21.2, jest 29.7.0, webpack 5.97.1, webpack-cli 5.1.4, locked: 480 packages in
#                 node_modules on Linux, 8.9k files), node_modules removed first (untimed); its
#                 npm cache (in $DATA) is filled from the registry once per run, untimed, so no
#                 network time is measured (quick: the same)
#   pytest        python -m pytest -q --hypothesis-seed=0 of attrs 25.3.0's own suite (1.3k tests,
#                 ~30 s; its sdist, copied into the measured directory untimed, imported from
#                 there with PYTHONPATH=src, bytecode written; pytest 8.3.5 and the test
#                 dependencies pinned in scripts/bench-pytest/requirements.txt, in a virtualenv in
#                 $DATA made once per run). Exit status 1 (some tests failed: one does on
#                 CPython 3.11 natively too) does not fail the workload; each target's summary
#                 line is reported, and a difference from native is flagged (quick: the same)
#   nm-clone      git clone --no-local of a repository holding that node_modules (480 packages,
#                 committed once per run from the primed tree, untimed, in $DATA; --no-local
#                 as a clone from a remote, where a local clone would hard-link natively)
#   nm-status     git status ×10 in the clone (the clone's first status among them)
#   nm-grep       grep -rnF of a fixed string over the clone's node_modules, output piped to
#                 wc -l (to /dev/null GNU grep stops reading each file at its first match)
#   node-modules  (for --only) nm-clone, nm-status and nm-grep
# npm-install and nm-* are skipped, with a note, if npm is missing or the registry cannot be
# reached; pytest likewise if the virtualenv or the sdist cannot be had.
# A workload whose input is missing (e.g. --only grep) prepares it first, untimed.
#
# Layout: everything lives on one fresh ext4 loop filesystem $MNT (docs/design.md §6: the root
# filesystem here has no journal and ages badly): $MNT/native/work (plain directory),
# $MNT/mounted/work (rewindfs mounted in place over it, store in $MNT/store-rewindfs),
# $MNT/bindfs/{src,work}, $MNT/fuse-overlayfs/{lower,upper,workdir,work},
# $MNT/passthrough_hp/{src,work}, $MNT/data (the
# tarball and generated inputs, read by every target; also the npm cache, the node_modules
# repository, the virtualenv and attrs' source). A trap unmounts everything and removes the
# image on exit.
#
# Checkpoint boundaries: issue 6 asks for "a checkpoint boundary every 1,000 operations".
# Operations cannot be counted from outside the daemon, so this approximates it. In every
# mode but off, one boundary is sent before each rewindfs workload (between phases); in loop
# mode a background loop also sends one every --boundary-ms (default 100 ms, about 1,000
# FUSE requests at the 20-100 us a request costs) while the workload runs. Each boundary is
# `rewindfs checkpoint <uuid> --session bench --socket $STORE/control.sock`. The
# "boundaries" column counts those sent during each workload (median over --repeat).
# Caveats: the loop's own cost (one client process per boundary) is charged to the
# rewindfs column, so ratios err against rewindfs; and a time-based loop over-samples long
# large-I/O phases (a 1 GiB write is ~1,000 1 MiB requests, i.e. ~1 boundary by the issue's
# measure, but ~10 per second of runtime here) — compare with --boundaries=phase. If the
# first checkpoint command fails, a warning is printed once and the run continues without
# boundaries.
#
# Timing: bash $EPOCHREALTIME differences around the command (python workloads time
# themselves with perf_counter). `sync` runs before every timed phase; the page cache is
# dropped (echo 3 > /proc/sys/vm/drop_caches) before seq-read and rand-read for every
# target; stat-100k runs with the kernel's dentries and inodes dropped (echo 2): the first look
# at a tree, as after mounting over an existing project, while the files' blocks stay cached;
# the other workloads run on a warm cache, as an agent's repeated commands do. Each number is a single run unless --repeat is given: expect noise of ±10–20% on the short workloads, more
# in --quick mode and when the machine is busy.
#
# Floors (--requests): every request the kernel sends makes the calling process wait for a
# round trip to the daemon, whatever the daemon does with it; the native work (the create, the
# write) is in the native column already. So native + requests x (the cost of a request
# answered at once) is a lower bound on any FUSE filesystem that sends that many requests, and
# a target below it is out of reach on this kernel without sending fewer. The bound is strict
# only where the requests come one after another; where they overlap (several threads or
# processes at once, or the kernel's asynchronous readahead) it is shown in parentheses. The
# count is of the rewindfs run: the kernel's own requests (a directory's attributes after each
# change, `security.capability` before writes, a rename target's lookup) included.
set -euo pipefail

ALL_WORKLOADS=(extract git-commit git-status grep edit-trunc edit-rename seq-write seq-write-cache seq-read
  overwrite-4k rand-write rand-read rm-rf cargo-build cargo-real stat-100k rewind-300 rewind-10k
  npm-install pytest nm-clone nm-status nm-grep)
NM_WORKLOADS="nm-clone,nm-status,nm-grep"  # --only node-modules
DROP_BEFORE=" seq-read rand-read "
DROP_DENTRIES_BEFORE=" stat-100k "
PEERS=(bindfs fuse-overlayfs passthrough_hp nocapture)

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '[bench] %s\n' "$*" >&2; }
warn() { printf '[bench] WARNING: %s\n' "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

# ---------------------------------------------------------------- arguments
REPEAT=1 QUICK=0 NATIVE_ONLY=0 BUILD=0 BOUNDARIES=loop BOUNDARY_MS=100 USE_LOOP=1
ONLY="" COMPARE="" MARKDOWN="" MOUNT_ARGS="" REQUESTS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --travel) shift; exec bash "$(dirname "${BASH_SOURCE[0]}")/bench-travel.sh" "$@" ;;
    --quick) QUICK=1 ;;
    --native-only) NATIVE_ONLY=1 ;;
    --build) BUILD=1 ;;
    --boundaries) BOUNDARIES=loop ;;
    --boundaries=*) BOUNDARIES=${1#*=} ;;
    --no-boundaries) BOUNDARIES=off ;;
    --boundary-ms) BOUNDARY_MS=${2:?--boundary-ms needs a value}; shift ;;
    --boundary-ms=*) BOUNDARY_MS=${1#*=} ;;
    --only) ONLY=${2:?--only needs a list}; shift ;;
    --only=*) ONLY=${1#*=} ;;
    --compare) COMPARE=${2:?--compare needs a list}; shift ;;
    --compare=*) COMPARE=${1#*=} ;;
    --markdown) MARKDOWN=${2:?--markdown needs a file}; shift ;;
    --markdown=*) MARKDOWN=${1#*=} ;;
    --mount-args) MOUNT_ARGS=${2?--mount-args needs a value}; shift ;;
    --mount-args=*) MOUNT_ARGS=${1#*=} ;;
    --no-loop) USE_LOOP=0 ;;
    --requests) REQUESTS=1 ;;
    --repeat) REPEAT=${2:?--repeat needs a count}; shift ;;
    --repeat=*) REPEAT=${1#*=} ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
  shift
done
[[ $BOUNDARIES =~ ^(loop|phase|off)$ ]] || die "--boundaries must be loop, phase or off"
[[ $BOUNDARY_MS =~ ^[0-9]+$ && $BOUNDARY_MS -gt 0 ]] || die "--boundary-ms must be a positive integer"
[[ $REPEAT =~ ^[0-9]+$ && $REPEAT -gt 0 ]] || die "--repeat must be a positive integer"
[ "$(id -u)" -eq 0 ] || die "run as root (loop mounts, FUSE mounts and drop_caches need it)"
for tool in python3 tar git dd awk; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
TRACEFS=/sys/kernel/tracing
if [ "$REQUESTS" = 1 ]; then
  [ "$NATIVE_ONLY" = 0 ] || die "--requests counts the requests rewindfs is sent: not with --native-only"
  [ -d "$TRACEFS/events" ] || mount -t tracefs nodev "$TRACEFS" 2>/dev/null || true
  [ -d "$TRACEFS/events/fuse/fuse_request_send" ] ||
    die "--requests needs the kernel's FUSE tracepoints (Linux >= 6.13, tracefs at $TRACEFS); none found"
  command -v mountpoint >/dev/null || die "--requests needs mountpoint (util-linux)"
fi
if [ -n "$MARKDOWN" ]; then
  case "$MARKDOWN" in /*) ;; *) MARKDOWN="$PWD/$MARKDOWN" ;; esac
fi

WORKLOADS=()
if [ -n "$ONLY" ]; then
  ONLY=",$ONLY,"; ONLY=${ONLY//,node-modules,/,$NM_WORKLOADS,}; ONLY=${ONLY#,}; ONLY=${ONLY%,}
  IFS=, read -r -a wanted <<<"$ONLY"
  for w in "${wanted[@]}"; do
    [[ " ${ALL_WORKLOADS[*]} " == *" $w "* ]] || die "unknown workload '$w' (known: ${ALL_WORKLOADS[*]} node-modules)"
  done
  for w in "${ALL_WORKLOADS[@]}"; do  # keep the canonical order
    [[ ",$ONLY," == *",$w,"* ]] && WORKLOADS+=("$w")
  done
else
  WORKLOADS=("${ALL_WORKLOADS[@]}")
fi

if [ "$QUICK" = 1 ]; then
  N_FILES=2000 N_DIRS=100 N_EDITS=1000 N_EDIT_FILES=100 SEQ_MB=64 RAND_MB=64 N_RAND=1000
  N_STAT=10000 N_REWIND=1000
else
  N_FILES=20000 N_DIRS=1000 N_EDITS=10000 N_EDIT_FILES=1000 SEQ_MB=1024 RAND_MB=256 N_RAND=10000
  N_STAT=100000 N_REWIND=10000
fi
N_STATUS=10

# ---------------------------------------------------------------- targets
TARGETS=(native)
NOTES=()
if [ "$NATIVE_ONLY" = 0 ]; then
  if [ -n "${REWINDFS_BIN:-}" ]; then
    case "$REWINDFS_BIN" in /*) BIN=$REWINDFS_BIN ;; *) BIN="$PWD/$REWINDFS_BIN" ;; esac
  else
    BIN="$REPO/target/release/rewindfs"
  fi
  if [ ! -x "$BIN" ]; then
    if [ "$BUILD" = 1 ] && [ -z "${REWINDFS_BIN:-}" ]; then
      command -v cargo >/dev/null || die "--build: cargo not found"
      log "building rewindfs (cargo build --release)"
      (cd "$REPO" && cargo build --release)
      [ -x "$BIN" ] || die "cargo build --release did not produce $BIN"
    else
      die "rewindfs binary not found at $BIN — build it (cargo build --release), pass --build, set REWINDFS_BIN, or run with --native-only"
    fi
  fi
  TARGETS+=(rewindfs)
else
  NOTES+=("rewindfs: not run (--native-only)")
fi
NOCAPTURE_BIN=${REWINDFS_NOCAPTURE_BIN:-$REPO/target/bench-nocapture/release/rewindfs}
if [ -n "$COMPARE" ]; then
  IFS=, read -r -a peers <<<"$COMPARE"
  for p in "${peers[@]}"; do
    [[ " ${PEERS[*]} " == *" $p "* ]] || die "unknown peer '$p' (known: ${PEERS[*]})"
    if [ "$p" = nocapture ]; then
      if [ ! -x "$NOCAPTURE_BIN" ] && [ "$BUILD" = 1 ]; then
        log "building $NOCAPTURE_BIN (cargo build --release --features bench-nocapture)"
        (cd "$REPO" && cargo build --release --features bench-nocapture \
          --target-dir "$REPO/target/bench-nocapture")
      fi
      if [ -x "$NOCAPTURE_BIN" ]; then
        TARGETS+=("$p")
      else
        NOTES+=("$p: $NOCAPTURE_BIN not found (pass --build, or set REWINDFS_NOCAPTURE_BIN) — column skipped")
        log "note: $NOCAPTURE_BIN is not found; skipping $p"
      fi
    elif [ "$p" = passthrough_hp ] && [ -n "${PASSTHROUGH_HP:-}" ]; then
      [ -x "$PASSTHROUGH_HP" ] || die "PASSTHROUGH_HP=$PASSTHROUGH_HP is not an executable"
      TARGETS+=("$p")
    elif [ "$p" = passthrough_hp ] && ! command -v "$p" >/dev/null; then
      NOTES+=("$p: not found (build it from libfuse >= 3.18 and set PASSTHROUGH_HP) — column skipped")
      log "note: $p is not found; skipping it"
    elif command -v "$p" >/dev/null; then
      TARGETS+=("$p")
    else
      NOTES+=("$p: not installed (apt-get install $p) — column skipped")
      log "note: $p is not installed; skipping it"
    fi
  done
fi

# ---------------------------------------------------------------- setup & cleanup
BASE=${BENCH_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$BASE"
ROOT=$(mktemp -d "$BASE/rewindfs-bench.XXXXXX")
IMG="$ROOT/img" MNT="$ROOT/mnt" RUN="$ROOT/run"
mkdir -p "$MNT" "$RUN/logs"
LOOP_MOUNTED=0
MOUNTS=()          # "kind:dir", unmounted in reverse order
BOUNDARY_PID=""
TRACE_KB=""        # the trace buffer's size before --requests changed it

is_mounted() { # exact mount point match in mountinfo (no stat, so a dead FUSE mount counts)
  awk -v d="$1" '$5 == d { found = 1 } END { exit !found }' /proc/self/mountinfo
}

unmount_one() { # kind dir
  local kind=$1 dir=$2 i
  is_mounted "$dir" || return 0
  case "$kind" in
    rewindfs) "$BIN" umount "$dir" >/dev/null 2>&1 || true ;;
    nocapture) "$NOCAPTURE_BIN" umount "$dir" >/dev/null 2>&1 || true ;;
  esac
  for i in 1 2 3 4 5; do
    is_mounted "$dir" || return 0
    umount "$dir" 2>/dev/null || sleep 0.3
  done
  is_mounted "$dir" || return 0
  warn "could not unmount $dir cleanly; detaching it lazily"
  umount -l "$dir" || true
}

cleanup() {
  local status=$? i
  set +e
  trap - EXIT INT TERM
  if [ -n "$BOUNDARY_PID" ]; then kill "$BOUNDARY_PID" 2>/dev/null; wait "$BOUNDARY_PID" 2>/dev/null; fi
  [ -z "$TRACE_KB" ] || trace_fuse off
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    unmount_one "${MOUNTS[i]%%:*}" "${MOUNTS[i]#*:}"
  done
  if [ "$LOOP_MOUNTED" = 1 ]; then
    for i in $(seq 1 40); do  # daemons may still hold their stores open for a moment
      umount "$MNT" 2>/dev/null && break
      sleep 0.25
    done
    if is_mounted "$MNT"; then
      warn "$MNT is still busy; detaching it lazily"
      umount -l "$MNT"
    fi
  fi
  if awk -v r="$ROOT/" 'index($5, r) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    warn "something is still mounted under $ROOT; leaving it in place"
  else
    rm -rf "$ROOT"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$USE_LOOP" = 1 ]; then
  if ! losetup -f >/dev/null 2>&1; then
    warn "no free loop device (losetup -f failed); falling back to a plain directory"
    USE_LOOP=0
  fi
fi
if [ "$USE_LOOP" = 1 ]; then
  # Preallocated where the space is there: in a sparse image the first write to each region
  # also allocates it in the filesystem beneath, which made a 1 GiB write with fsync take
  # 4.8-6.3 s in the first round against 1.0-1.5 s in a preallocated one (docs/benchmarks.md),
  # charged to whichever target wrote there first.
  IMG_KIND=sparse
  if fallocate -l "${BENCH_IMG_SIZE:-16G}" "$IMG" 2>/dev/null &&
    [ "$(df --output=avail -B1 "$BASE" | tail -1)" -gt $((2 << 30)) ] &&
    [ "$(df --output=fstype "$BASE" | tail -1)" != tmpfs ]; then
    IMG_KIND=preallocated
  else
    rm -f "$IMG"
  fi
  if { [ "$IMG_KIND" = preallocated ] || truncate -s "${BENCH_IMG_SIZE:-16G}" "$IMG"; } &&
    mkfs.ext4 -q -F "$IMG" && mount -o loop "$IMG" "$MNT"; then
    LOOP_MOUNTED=1
    FS_DESC="fresh ext4 loop mount (${BENCH_IMG_SIZE:-16G} $IMG_KIND image in $BASE)"
  else
    warn "could not make and loop-mount an ext4 image; falling back to a plain directory on $(df --output=fstype "$BASE" | tail -1)"
    rm -f "$IMG"
    USE_LOOP=0
  fi
fi
if [ "$USE_LOOP" = 0 ]; then
  warn "not using a fresh ext4 loop filesystem: numbers from an aged or journal-less filesystem are not comparable (docs/design.md §6)"
  FS_DESC="plain directory on $(df --output=fstype "$BASE" | tail -1) ($BASE)"
fi
log "working in $MNT — $FS_DESC"
log "targets: ${TARGETS[*]}; workloads: ${WORKLOADS[*]}"

DATA="$MNT/data"
mkdir -p "$DATA"
STORE="$MNT/store-rewindfs"
SOCK="$STORE/control.sock"

# Git: no user or system config, a fixed identity.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
# No automatic gc/maintenance: `git commit` of 20k loose objects otherwise starts a detached
# `git gc --auto` that keeps running into the next workloads (it skewed their times and once
# recreated .git/objects/info/packs under a running rm -rf).
export GIT_CONFIG_COUNT=2 GIT_CONFIG_KEY_0=gc.auto GIT_CONFIG_VALUE_0=0
export GIT_CONFIG_KEY_1=maintenance.auto GIT_CONFIG_VALUE_1=false
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid
export LC_ALL=C

# ---------------------------------------------------------------- helpers in python
cat >"$RUN/bio.py" <<'PY'
"""Workload helpers. Timed subcommands print their elapsed seconds (perf_counter) on stdout."""
import os, random, sys, time

WORDS = ("let fn pub struct impl match self return value result error buffer index count "
         "path name config state handle write read open close flush parse token node tree "
         "list map vec string option some none ok err async await use mod crate super").split()

def gen_tree(root, n_files, n_dirs):
    rng = random.Random(20240601)
    top = max(1, int(round(n_dirs ** 0.5)))
    sub = max(1, n_dirs // top)
    dirs = [os.path.join(root, f"pkg{a:03d}", f"mod{b:03d}") for a in range(top) for b in range(sub)]
    exts = ["rs", "py", "c", "h", "ts", "md", "json", "toml"]
    lines = []
    for i in range(4000):
        k = rng.randint(2, 12)
        lines.append("    " * rng.randint(0, 3) + " ".join(rng.choice(WORDS) for _ in range(k)) + f" {i};\n")
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    for i in range(n_files):
        d = dirs[i % len(dirs)]
        size = min(16384, max(80, int(rng.lognormvariate(7.4, 0.9))))  # median ~1.6 KiB
        parts, total = [], 0
        if i % 97 == 0:
            parts.append("// BENCH_NEEDLE: look here\n")
        while total < size:
            ln = lines[rng.randrange(len(lines))]
            parts.append(ln)
            total += len(ln)
        name = f"file{i // len(dirs):04d}.{exts[i % len(exts)]}"
        with open(os.path.join(d, name), "w") as f:
            f.write("".join(parts))
    with open(os.path.join(root, "README.md"), "w") as f:
        f.write("# synthetic tree for rewindfs bench\n")

def payloads(n=64):
    rng = random.Random(7)
    out = []
    for i in range(n):
        body = "".join(f"line {j} of edit variant {i} {rng.random()}\n" for j in range(rng.randint(20, 120)))
        out.append(body.encode())
    return out

def make_edit_files(d, n):
    os.makedirs(d, exist_ok=True)
    p = payloads()
    for i in range(n):
        with open(os.path.join(d, f"f{i:05d}.txt"), "wb") as f:
            f.write(p[i % len(p)])

def edit(d, n, mode):
    names = sorted(x for x in os.listdir(d) if x.endswith(".txt"))
    paths = [os.path.join(d, x) for x in names]
    tmps = [os.path.join(d, "." + x + ".tmp") for x in names]
    p = payloads()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    m = len(paths)
    t = time.perf_counter()
    if mode == "trunc":
        for i in range(n):
            fd = os.open(paths[i % m], flags, 0o644)
            os.write(fd, p[i % len(p)])
            os.close(fd)
    else:
        for i in range(n):
            k = i % m
            fd = os.open(tmps[k], flags, 0o644)
            os.write(fd, p[(i + 1) % len(p)])
            os.close(fd)
            os.rename(tmps[k], paths[k])
    print(time.perf_counter() - t)

def make_many(d, n, dirs, content):
    for k in range(dirs):
        os.makedirs(os.path.join(d, f"d{k:03d}"), exist_ok=True)
    for i in range(n):
        with open(os.path.join(d, f"d{i % dirs:03d}", f"f{i:06d}"), "w") as f:
            f.write(content.format(i=i))

def offsets(size, n, seed):
    rng = random.Random(seed)
    blocks = size // 4096
    return [rng.randrange(blocks) * 4096 for _ in range(n)]

def rand_write(path, n):
    size = os.path.getsize(path)
    offs = offsets(size, n, 1)
    buf = bytes(random.Random(2).getrandbits(8) for _ in range(4096))
    fd = os.open(path, os.O_WRONLY)
    t = time.perf_counter()
    for o in offs:
        os.pwrite(fd, buf, o)
    os.close(fd)
    print(time.perf_counter() - t)

def rand_read(path, n):
    size = os.path.getsize(path)
    offs = offsets(size, n, 3)
    fd = os.open(path, os.O_RDONLY)
    t = time.perf_counter()
    for o in offs:
        os.pread(fd, 4096, o)
    os.close(fd)
    print(time.perf_counter() - t)

def overwrite(path):
    size = os.path.getsize(path)
    buf = b"\xab" * 4096
    t = time.perf_counter()
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, buf, (size // 2) // 4096 * 4096)
    os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.write(fd, buf)
    os.close(fd)
    print(time.perf_counter() - t)

def statx_loop(path, n):
    # statx(AT_STATX_FORCE_SYNC): natively a plain stat; through FUSE one GETATTR each time,
    # which the daemon answers with one fstat (the kernel's cache is bypassed).
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    f = libc.statx
    f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    buf = ctypes.create_string_buffer(256)
    p = os.fsencode(path)
    AT_FDCWD, FORCE_SYNC, BASIC_STATS = -100, 0x2000, 0x7FF
    for i in range(n // 10 + n):
        if i == n // 10:
            t = time.perf_counter()
        if f(AT_FDCWD, p, FORCE_SYNC, BASIC_STATS, buf) != 0:
            sys.exit(f"statx {path}: {os.strerror(ctypes.get_errno())}")
    print(time.perf_counter() - t)

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "gen-tree": gen_tree(args[0], int(args[1]), int(args[2]))
elif cmd == "edit-files": make_edit_files(args[0], int(args[1]))
elif cmd == "edit": edit(args[0], int(args[1]), args[2])
elif cmd == "rand-write": rand_write(args[0], int(args[1]))
elif cmd == "rand-read": rand_read(args[0], int(args[1]))
elif cmd == "overwrite": overwrite(args[0])
elif cmd == "many": make_many(args[0], int(args[1]), int(args[2]), args[3])
elif cmd == "statx": statx_loop(args[0], int(args[1]))
else: sys.exit(f"unknown command {cmd}")
PY

# ---------------------------------------------------------------- shared inputs
TARBALL="$DATA/tree.tar"
need_tree=0
for w in "${WORKLOADS[@]}"; do
  case "$w" in extract|git-commit|git-status|grep|rm-rf) need_tree=1 ;; esac
done
if [ "$need_tree" = 1 ]; then
  log "generating a $N_FILES-file tree in $N_DIRS directories and its tarball"
  python3 "$RUN/bio.py" gen-tree "$DATA/gen/tree" "$N_FILES" "$N_DIRS"
  tar -C "$DATA/gen" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@1700000000 \
    -cf "$TARBALL" tree
  rm -rf "$DATA/gen"
  log "tarball: $(du -h "$TARBALL" | cut -f1), $(tar -tf "$TARBALL" | wc -l) entries"
fi

HAVE_CARGO=0
if command -v cargo >/dev/null; then HAVE_CARGO=1; fi
if [[ " ${WORKLOADS[*]} " == *" cargo-build "* ]]; then
  if [ "$HAVE_CARGO" = 1 ]; then
    c="$DATA/crate"
    mkdir -p "$c/src"
    cat >"$c/Cargo.toml" <<'EOF'
[package]
name = "benchcrate"
version = "0.1.0"
edition = "2021"

[dependencies]

# Its own workspace, whatever directory it ends up in.
[workspace]
EOF
    {
      for m in 0 1 2 3 4 5 6 7; do echo "mod m$m;"; done
      echo 'fn main() {'
      echo '    let mut total = 0u64;'
      for m in 0 1 2 3 4 5 6 7; do echo "    total = total.wrapping_add(m$m::run(${m}));"; done
      echo '    println!("{total}");'
      echo '}'
    } >"$c/src/main.rs"
    for m in 0 1 2 3 4 5 6 7; do
      cat >"$c/src/m$m.rs" <<EOF
use std::collections::HashMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Shape$m { Circle(f64), Rect { w: f64, h: f64 }, Named(String) }

pub trait Area { fn area(&self) -> f64; }

impl Area for Shape$m {
    fn area(&self) -> f64 {
        match self {
            Shape$m::Circle(r) => std::f64::consts::PI * r * r,
            Shape$m::Rect { w, h } => w * h,
            Shape$m::Named(n) => n.len() as f64,
        }
    }
}

impl fmt::Display for Shape$m {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { write!(f, "{:?}={:.2}", self, self.area()) }
}

pub struct Registry<T: Area> { items: Vec<T>, index: HashMap<String, usize> }

impl<T: Area + fmt::Display> Registry<T> {
    pub fn new() -> Self { Registry { items: Vec::new(), index: HashMap::new() } }
    pub fn add(&mut self, item: T) { self.index.insert(item.to_string(), self.items.len()); self.items.push(item); }
    pub fn total(&self) -> f64 { self.items.iter().map(|s| s.area()).sum() }
    pub fn largest(&self) -> Option<&T> {
        self.items.iter().max_by(|a, b| a.area().partial_cmp(&b.area()).unwrap_or(std::cmp::Ordering::Equal))
    }
}

pub fn run(seed: u64) -> u64 {
    let mut r = Registry::new();
    for i in 0..(50 + seed) {
        let f = i as f64;
        r.add(match i % 3 { 0 => Shape$m::Circle(f), 1 => Shape$m::Rect { w: f, h: f + 1.0 }, _ => Shape$m::Named(format!("s{i}")) });
    }
    let words: Vec<String> = r.index.keys().filter(|k| k.contains('1')).cloned().collect();
    (r.total() as u64).wrapping_add(words.len() as u64).wrapping_add(r.largest().map(|s| s.area() as u64).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test] fn area() { assert_eq!(Shape$m::Rect { w: 2.0, h: 3.0 }.area(), 6.0); }
}
EOF
    done
  else
    NOTES+=("cargo-build: skipped (cargo not found)")
    log "note: cargo not found; cargo-build will be skipped"
  fi
fi

# npm-install and nm-*: a real project's locked dependency tree (scripts/bench-npm). The npm
# cache is filled once, from the registry, with a plain npm ci of the project in $DATA/npm-tree
# (untimed); that tree, committed, is the repository nm-clone clones.
declare -A SKIP=()  # workload -> 1: skipped (its note says why)
selected() { local w; for w in "$@"; do [[ " ${WORKLOADS[*]} " == *" $w "* ]] && return 0; done; return 1; }
skip_workloads() { # reason workloads...: skip those of them that are selected, with a note
  local reason=$1 w ws=(); shift
  for w in "$@"; do selected "$w" && { SKIP[$w]=1; ws+=("$w"); }; done
  [ ${#ws[@]} -eq 0 ] && return 0
  NOTES+=("${ws[*]}: skipped — $reason")
  warn "skipping ${ws[*]}: $reason"
}
NPM_WLS=(npm-install nm-clone nm-status nm-grep)
NPM_PROJECT="$REPO/scripts/bench-npm"
NPM_CACHE="$DATA/npm-cache" NM_SRC="$DATA/npm-tree"
NPM_FLAGS=(--no-audit --no-fund --no-update-notifier --loglevel=warn --cache "$NPM_CACHE")
NM_PATTERN='process.env.NODE_ENV'
NPM_PKGS=""
if selected "${NPM_WLS[@]}"; then
  if ! command -v npm >/dev/null; then
    skip_workloads "npm not found" "${NPM_WLS[@]}"
  else
    log "filling an npm cache from the registry for $NPM_PROJECT (untimed)"
    mkdir -p "$NM_SRC"
    cp "$NPM_PROJECT/package.json" "$NPM_PROJECT/package-lock.json" "$NM_SRC/"
    if (cd "$NM_SRC" && timeout 900 npm ci "${NPM_FLAGS[@]}" --fetch-retries=1 --fetch-timeout=60000) \
      >"$RUN/logs/npm-prime.log" 2>&1; then
      NPM_PKGS=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["packages"]))' \
        "$NM_SRC/node_modules/.package-lock.json")
      log "npm: $NPM_PKGS packages, $(find "$NM_SRC/node_modules" -type f | wc -l) files, $(du -sh "$NM_SRC/node_modules" | cut -f1)"
      if selected nm-clone nm-status nm-grep; then
        git -C "$NM_SRC" init -q -b main
        git -C "$NM_SRC" add -A
        git -C "$NM_SRC" commit -q -m "bench: a project with its node_modules"
        git -C "$NM_SRC" repack -adq  # one pack: clone serves it as it is
      fi
    else
      skip_workloads "npm ci from the registry failed (unreachable?): $(grep -m1 -i 'err' "$RUN/logs/npm-prime.log" || tail -n 1 "$RUN/logs/npm-prime.log")" "${NPM_WLS[@]}"
    fi
  fi
fi

# cargo-real: a real locked dependency tree (scripts/bench-cargo), its crates fetched into a
# CARGO_HOME in $DATA (untimed), so the timed builds read no network.
CARGO_PROJECT="$REPO/scripts/bench-cargo"
CARGO_REAL_HOME="$DATA/cargo-home" CARGO_REAL_SRC="$DATA/cargo-real"
if selected cargo-real; then
  if [ "$HAVE_CARGO" = 0 ]; then
    skip_workloads "cargo not found" cargo-real
  else
    log "fetching the crates of $CARGO_PROJECT from crates.io (untimed)"
    mkdir -p "$CARGO_REAL_SRC"
    cp -r "$CARGO_PROJECT/Cargo.toml" "$CARGO_PROJECT/Cargo.lock" "$CARGO_PROJECT/src" "$CARGO_REAL_SRC/"
    if (cd "$CARGO_REAL_SRC" && CARGO_HOME="$CARGO_REAL_HOME" timeout 600 cargo fetch --locked) \
      >"$RUN/logs/cargo-prime.log" 2>&1; then
      log "cargo-real: $(grep -c '^name = ' "$CARGO_REAL_SRC/Cargo.lock") packages locked, $(cargo --version)"
    else
      skip_workloads "cargo fetch from crates.io failed (unreachable?): $(tail -n 1 "$RUN/logs/cargo-prime.log")" cargo-real
    fi
  fi
fi

# pytest: attrs' sdist (tests included) and a virtualenv with its test dependencies, in $DATA.
ATTRS_VERSION=25.3.0
ATTRS_URL="https://files.pythonhosted.org/packages/5a/b0/1367933a8532ee6ff8d63537de4f1177af4bff9f3e829baf7331f595bb24/attrs-$ATTRS_VERSION.tar.gz"
ATTRS_SHA256=75d7cefc7fb576747b2c81b4442d4d4a1ce0900973527c011d1030fd3bf4af1b
PYVENV="$DATA/pyvenv" PYSRC="$DATA/pysrc/attrs-$ATTRS_VERSION"
if selected pytest; then
  log "making a virtualenv with pytest and attrs $ATTRS_VERSION's test dependencies, fetching its sdist (untimed)"
  if {
    python3 -m venv "$PYVENV" &&
      "$PYVENV/bin/pip" install -q --retries 1 --timeout 30 -r "$REPO/scripts/bench-pytest/requirements.txt" &&
      python3 -c '
import hashlib, sys, urllib.request
url, sha, out = sys.argv[1:]
data = urllib.request.urlopen(url, timeout=60).read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit(f"{url}: sha256 mismatch")
open(out, "wb").write(data)' "$ATTRS_URL" "$ATTRS_SHA256" "$DATA/attrs.tar.gz" &&
      mkdir -p "$DATA/pysrc" && tar -C "$DATA/pysrc" -xzf "$DATA/attrs.tar.gz" && [ -d "$PYSRC/tests" ]
  } >"$RUN/logs/pytest-prime.log" 2>&1; then
    log "pytest: $("$PYVENV/bin/python" -m pytest --version 2>&1), attrs $ATTRS_VERSION: $(find "$PYSRC" -name '*.py' | wc -l) .py files"
  else
    skip_workloads "could not make the virtualenv or fetch attrs' sdist: $(tail -n 1 "$RUN/logs/pytest-prime.log")" pytest
  fi
fi

# ---------------------------------------------------------------- target mounts
workdir() { if [ "$1" = rewindfs ]; then echo "$MNT/mounted/work"; else echo "$MNT/$1/work"; fi; }

mount_target() {
  local t=$1 w
  w=$(workdir "$t")
  case "$t" in
    native)
      mkdir -p "$w" ;;
    rewindfs)
      mkdir -p "$w" "$STORE"
      MOUNTS+=("rewindfs:$w")
      # shellcheck disable=SC2086  # MOUNT_ARGS is split on purpose
      "$BIN" mount "$w" --store "$STORE" $MOUNT_ARGS || die "rewindfs mount $w failed"
      is_mounted "$w" || die "rewindfs mount returned but $w is not a mount point"
      if [ "$BOUNDARIES" != off ] && ! send_boundary_checked; then
        BOUNDARIES=off
      fi ;;
    bindfs)
      mkdir -p "$MNT/bindfs/src" "$w"
      MOUNTS+=("bindfs:$w")
      bindfs "$MNT/bindfs/src" "$w" 2>"$RUN/logs/mount.bindfs.log" ||
        die "bindfs mount failed: $(cat "$RUN/logs/mount.bindfs.log")" ;;
    fuse-overlayfs)
      mkdir -p "$MNT/fuse-overlayfs/"{lower,upper,workdir} "$w"
      MOUNTS+=("fuse-overlayfs:$w")
      # (it warns "unknown argument ignored: lazytime" about the ext4 mount options: harmless)
      fuse-overlayfs -o "lowerdir=$MNT/fuse-overlayfs/lower,upperdir=$MNT/fuse-overlayfs/upper,workdir=$MNT/fuse-overlayfs/workdir" \
        "$w" 2>"$RUN/logs/mount.fuse-overlayfs.log" ||
        die "fuse-overlayfs mount failed: $(cat "$RUN/logs/mount.fuse-overlayfs.log")" ;;
    nocapture)
      mkdir -p "$w" "$MNT/nocapture/store"
      MOUNTS+=("nocapture:$w")
      # shellcheck disable=SC2086  # MOUNT_ARGS is split on purpose
      REWINDFS_BENCH_NOCAPTURE=1 "$NOCAPTURE_BIN" mount "$w" --store "$MNT/nocapture/store" \
        $MOUNT_ARGS 2>"$RUN/logs/mount.nocapture.log" ||
        die "nocapture mount failed: $(cat "$RUN/logs/mount.nocapture.log")"
      grep -q REWINDFS_BENCH_NOCAPTURE "$MNT/nocapture/store/daemon.log" 2>/dev/null || warn "nocapture: the daemon did not say it records nothing (is $NOCAPTURE_BIN built with bench-nocapture?)" ;;
    passthrough_hp)
      mkdir -p "$MNT/passthrough_hp/src" "$w"
      MOUNTS+=("passthrough_hp:$w")
      "${PASSTHROUGH_HP:-passthrough_hp}" "$MNT/passthrough_hp/src" "$w" \
        -o io_uring -o default_permissions 2>"$RUN/logs/mount.passthrough_hp.log" ||
        die "passthrough_hp mount failed: $(cat "$RUN/logs/mount.passthrough_hp.log")" ;;
  esac
  [ "$t" = native ] || log "mounted $t on $w"
}

uuid() { cat /proc/sys/kernel/random/uuid; }

daemon_proc() { # the /proc directory of the rewindfs daemon serving the bench mount
  local p
  for p in /proc/[0-9]*; do
    if [ "$(cat "$p/comm" 2>/dev/null)" = "$(basename "$BIN" | cut -c1-15)" ] &&
      tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "--foreground" &&
      tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF "$(workdir rewindfs)"; then
      echo "$p"
      return
    fi
  done
}
daemon_rss() { local p; p=$(daemon_proc); [ -n "$p" ] && awk '/VmRSS/ { printf "%.1f MiB", $2 / 1024 }' "$p/status"; }

BFILE="$RUN/boundaries"  # one line per boundary sent during the current workload
send_boundary() {
  "$BIN" checkpoint "$(uuid)" --session bench --socket "$SOCK" >/dev/null 2>&1 && echo >>"$BFILE"
}

send_boundary_checked() {
  local err
  if ! err=$("$BIN" checkpoint "$(uuid)" --session bench --socket "$SOCK" 2>&1 >/dev/null); then
    warn "rewindfs checkpoint failed (${err:-no message}); continuing WITHOUT checkpoint boundaries"
    NOTES+=("checkpoint boundaries: OFF — \`rewindfs checkpoint\` failed: ${err%%$'\n'*}")
    return 1
  fi
}

start_boundary_loop() {
  local secs
  secs=$(awk -v ms="$BOUNDARY_MS" 'BEGIN { printf "%.3f", ms / 1000 }')
  (
    trap 'exit 0' TERM
    while :; do
      send_boundary || true
      sleep "$secs"
    done
  ) &
  BOUNDARY_PID=$!
}

stop_boundary_loop() {
  if [ -n "$BOUNDARY_PID" ]; then
    kill "$BOUNDARY_PID" 2>/dev/null || true
    wait "$BOUNDARY_PID" 2>/dev/null || true
    BOUNDARY_PID=""
  fi
}

DROP_OK=1
drop_caches() { # [what]: 3 (default) page cache, dentries and inodes; 2 dentries and inodes
  sync
  if [ "$DROP_OK" = 1 ] && ! { echo "${1:-3}" >/proc/sys/vm/drop_caches; } 2>/dev/null; then
    DROP_OK=0
    warn "cannot write /proc/sys/vm/drop_caches; reads will run on a warm cache"
    NOTES+=("page cache could NOT be dropped: read workloads ran warm")
  fi
}

# ---------------------------------------------------------------- workloads
# prep_X W: untimed set-up of the inputs of X in W.  wl_X W: the workload; writes the
# elapsed seconds to $TFILE.  Both run in a subshell with set -e, cwd = W.
TFILE="$RUN/elapsed"
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.6f\n", b - a }' >"$TFILE"; }
fmt_secs() { # raw seconds -> 3 decimals, or 5 below 10 ms; words pass through
  awk -v s="$1" 'BEGIN { if (s !~ /^[0-9.]+$/) print s; else if (s < 0.01) printf "%.5f\n", s; else printf "%.3f\n", s }'
}
py_timed() { python3 "$RUN/bio.py" "$@" >"$TFILE"; }

# A marker, outside the measured directory (no request counted for it), for a tree whose
# extraction finished: a tree without one is what a failed extract left, made again rather
# than measured.
tree_done() { echo "$RUN/tree-complete.$(target_here)"; }
ensure_tree() {
  [ -d tree ] && [ -e "$(tree_done)" ] && return 0
  rm -rf tree
  tar --no-same-owner -xf "$TARBALL"
  touch "$(tree_done)"
}
ensure_repo() {
  ensure_tree
  # A repository without a commit is what a failed git-commit left: made again.
  # (tree/.git first: without it, git would look for a repository above the tree.)
  if ! { [ -d tree/.git ] && git -C tree rev-parse -q --verify HEAD >/dev/null 2>&1; }; then
    rm -rf tree/.git
    git -C tree init -q -b main
    git -C tree add -A
    git -C tree commit -q -m "bench: initial"
  fi
}
ensure_seq() { # of its full size: a shorter one is what a failed seq-write left
  [ "$(stat -c %s seq.bin 2>/dev/null || echo 0)" = $((SEQ_MB << 20)) ] ||
    dd if=/dev/zero of=seq.bin bs=1M count="$SEQ_MB" conv=fsync status=none
}
ensure_rand() { [ -f rand.bin ] || dd if=/dev/urandom of=rand.bin bs=1M count="$RAND_MB" conv=fsync status=none; }
ensure_edits() { [ -d edits ] || python3 "$RUN/bio.py" edit-files edits "$N_EDIT_FILES"; }

prep_extract() { rm -rf tree "$(tree_done)"; }
wl_extract() { local t; t=$EPOCHREALTIME; tar --no-same-owner -xf "$TARBALL"; since "$t"; touch "$(tree_done)"; }

prep_git-commit() { ensure_tree; rm -rf tree/.git; git -C tree init -q -b main; }
wl_git-commit() { local t; t=$EPOCHREALTIME; (cd tree && git add -A && git commit -q -m "bench: import"); since "$t"; }

prep_git-status() { ensure_repo; }
wl_git-status() {
  local t i; t=$EPOCHREALTIME
  for ((i = 0; i < N_STATUS; i++)); do git -C tree status >/dev/null; done
  since "$t"
}

prep_grep() { ensure_tree; }
wl_grep() { local t; t=$EPOCHREALTIME; grep -r BENCH_NEEDLE tree >/dev/null; since "$t"; }

prep_edit-trunc() { ensure_edits; }
wl_edit-trunc() { py_timed edit edits "$N_EDITS" trunc; }

prep_edit-rename() { ensure_edits; }
wl_edit-rename() { py_timed edit edits "$N_EDITS" rename; }

prep_seq-write() { rm -f seq.bin; }
wl_seq-write() {
  local t; t=$EPOCHREALTIME
  dd if=/dev/zero of=seq.bin bs=1M count="$SEQ_MB" conv=fsync status=none
  since "$t"
}

prep_seq-write-cache() { rm -f seq.bin; }
wl_seq-write-cache() {
  local t; t=$EPOCHREALTIME
  dd if=/dev/zero of=seq.bin bs=1M count="$SEQ_MB" status=none
  since "$t"
  sync
}

prep_seq-read() { ensure_seq; }
wl_seq-read() { local t; t=$EPOCHREALTIME; dd if=seq.bin of=/dev/null bs=1M status=none; since "$t"; }

prep_overwrite-4k() { ensure_seq; }
wl_overwrite-4k() { py_timed overwrite seq.bin; }

prep_rand-write() { ensure_rand; }
wl_rand-write() { py_timed rand-write rand.bin "$N_RAND"; }

prep_rand-read() { ensure_rand; }
wl_rand-read() { py_timed rand-read rand.bin "$N_RAND"; }

prep_rm-rf() { ensure_repo; }
wl_rm-rf() { local t; rm -f "$(tree_done)"; t=$EPOCHREALTIME; rm -rf tree; since "$t"; }

prep_cargo-build() { rm -rf crate; cp -r "$DATA/crate" crate; }
wl_cargo-build() {
  local t; t=$EPOCHREALTIME
  (cd crate && CARGO_TARGET_DIR="$PWD/target" cargo build --offline -q)
  since "$t"
}

prep_cargo-real() { rm -rf cargo-real; cp -r "$CARGO_REAL_SRC" cargo-real; }
wl_cargo-real() {
  local t; t=$EPOCHREALTIME
  (cd cargo-real && CARGO_HOME="$CARGO_REAL_HOME" CARGO_TARGET_DIR="$PWD/target" \
    cargo build --offline --locked -q)
  since "$t"
}

prep_stat-100k() { [ -d many ] || python3 "$RUN/bio.py" many many "$N_STAT" 100 ""; }
wl_stat-100k() {
  local t; t=$EPOCHREALTIME
  find many -printf '%s %m\n' >/dev/null
  since "$t"
  if [ "$(basename "$PWD")" = work ] && [ "$PWD" = "$(workdir rewindfs)" ]; then
    # The timed rounds' (after the workloads before it) and the counted run's (after every
    # workload), each the last of its kind.
    daemon_rss >"$RUN/rss-after-stat${COUNTING:+-late}"
  fi
}

# Native: the nearest equivalent of a rewind, restoring the files from a backup copy.
# rewind_prep NAME COUNT DIRS; rewind_run NAME.
rewind_prep() {
  local d=$1 n=$2 dirs=$3
  rm -rf "$d"
  python3 "$RUN/bio.py" many "$d" "$n" "$dirs" "version one of file {i}\n"
  if [ "$PWD" = "$(workdir rewindfs)" ]; then
    uuid >"$RUN/$d.uuid"
    "$BIN" checkpoint "$(cat "$RUN/$d.uuid")" --session "bench-$d" --socket "$SOCK" >/dev/null
  else
    rm -rf "$DATA/$d.$(basename "$(dirname "$PWD")")"
    cp -a "$d" "$DATA/$d.$(basename "$(dirname "$PWD")")"
  fi
  python3 "$RUN/bio.py" many "$d" "$n" "$dirs" "version two of file {i}, a little longer\n"
}
rewind_run() {
  local d=$1 t; t=$EPOCHREALTIME
  if [ "$PWD" = "$(workdir rewindfs)" ]; then
    "$BIN" rewind "$(cat "$RUN/$d.uuid")" --scope all --socket "$SOCK" >/dev/null
  else
    rm -rf "$d" && cp -a "$DATA/$d.$(basename "$(dirname "$PWD")")" "$d"
  fi
  since "$t"
  grep -q "version one of file 0" "$d"/d000/f000000
}
prep_rewind-10k() { rewind_prep rw "$N_REWIND" 100; }
wl_rewind-10k() { rewind_run rw; }
prep_rewind-300() { rewind_prep rw300 300 3; }
wl_rewind-300() { rewind_run rw300; }

# The target a workload runs for, from its directory (for per-target output files).
target_here() { if [ "$PWD" = "$(workdir rewindfs)" ]; then echo rewindfs; else basename "$(dirname "$PWD")"; fi; }

prep_npm-install() { rm -rf npm; mkdir npm; cp "$NPM_PROJECT/package.json" "$NPM_PROJECT/package-lock.json" npm/; }
wl_npm-install() {
  local t; t=$EPOCHREALTIME
  (cd npm && npm ci --offline "${NPM_FLAGS[@]}")
  since "$t"
}

prep_pytest() { rm -rf attrs; cp -r "$PYSRC" attrs; }
wl_pytest() {
  local t st=0 out; out="$RUN/pytest.$(target_here).out"
  t=$EPOCHREALTIME
  (cd attrs && env -u PYTHONDONTWRITEBYTECODE PYTHONPATH=src \
    "$PYVENV/bin/python" -m pytest -q --hypothesis-seed=0 >"$out" 2>&1) || st=$?
  since "$t"
  tail -n 1 "$out"
  [ "$st" -le 1 ]  # 1: some tests failed (reported); more: pytest did not run the suite
}

nm_clone() { git clone -q --no-local "$NM_SRC" nm; }
prep_nm-clone() { rm -rf nm; }
wl_nm-clone() { local t; t=$EPOCHREALTIME; nm_clone; since "$t"; }

prep_nm-status() { [ -d nm/.git ] || nm_clone; }
wl_nm-status() {
  local t i; t=$EPOCHREALTIME
  for ((i = 0; i < N_STATUS; i++)); do git -C nm status >/dev/null; done
  since "$t"
}

prep_nm-grep() { [ -d nm/.git ] || nm_clone; }
wl_nm-grep() { local t; t=$EPOCHREALTIME; grep -rnF -- "$NM_PATTERN" nm/node_modules | wc -l; since "$t"; }

# The last selected workload using a big file frees it afterwards (untimed): the image has
# to hold every target's copy.
last_of() { local w r=""; for w in "${WORKLOADS[@]}"; do [[ " $* " == *" $w "* ]] && r=$w; done; echo "$r"; }
LAST_SEQ=$(last_of seq-write seq-write-cache seq-read overwrite-4k)
LAST_RAND=$(last_of rand-write rand-read)
post_cleanup() { # wl
  if [ "$1" = "$LAST_SEQ" ]; then rm -f seq.bin; fi
  if [ "$1" = "$LAST_RAND" ]; then rm -f rand.bin; fi
}

# in_dir dir fn args...: run fn in a set -e subshell in dir; its status goes to $ST. Call it
# as a plain statement, never in a condition (there bash ignores the subshell's set -e).
ST=0
in_dir() {
  local d=$1; shift
  set +e
  ( set -euo pipefail; cd "$d"; "$@" )
  ST=$?
  set -e
}

store_bytes() { du -sb "$STORE" 2>/dev/null | cut -f1 || echo 0; }

declare -A SAMPLES DELTAS BCOUNTS RES STORE_DELTA BOUNDS
FAILED=()

run_one() { # workload target repetition
  local wl=$1 t=$2 r=$3 w lf before=0 after secs
  w=$(workdir "$t")
  lf="$RUN/logs/$wl.$t.$r.log"
  if [ "$wl" = cargo-build ] && [ "$HAVE_CARGO" = 0 ]; then SAMPLES[$wl/$t]=skipped; return; fi
  if [ -n "${SKIP[$wl]:-}" ]; then SAMPLES[$wl/$t]=skipped; return; fi
  [ "${SAMPLES[$wl/$t]:-}" = error ] && return  # failed before: do not retry
  in_dir "$w" "prep_$wl" >"$lf" 2>&1
  if [ "$ST" -ne 0 ]; then
    SAMPLES[$wl/$t]=error; FAILED+=("$wl/$t (prep)")
    warn "$wl on $t: preparation failed (log: $lf):"; tail -n 5 "$lf" >&2; return
  fi
  if [[ $DROP_BEFORE == *" $wl "* ]]; then drop_caches
  elif [[ $DROP_DENTRIES_BEFORE == *" $wl "* ]]; then drop_caches 2
  else sync; fi
  if [ "$t" = rewindfs ]; then
    before=$(store_bytes)
    : >"$BFILE"
    if [ "$BOUNDARIES" != off ]; then send_boundary || true; fi
    if [ "$BOUNDARIES" = loop ]; then start_boundary_loop; fi
  fi
  rm -f "$TFILE"
  in_dir "$w" "wl_$wl" >>"$lf" 2>&1
  if [ "$ST" -eq 0 ] && [ -s "$TFILE" ]; then
    secs=$(awk '{ printf "%.6f", $1 }' "$TFILE")
    SAMPLES[$wl/$t]+="$secs "
  else
    SAMPLES[$wl/$t]=error; FAILED+=("$wl/$t")
    warn "$wl on $t failed (log: $lf):"; tail -n 5 "$lf" >&2
  fi
  stop_boundary_loop
  if [ "$t" = rewindfs ]; then
    sync
    after=$(store_bytes)
    BCOUNTS[$wl]+="$(wc -l <"$BFILE") "
    DELTAS[$wl]+="$(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.1f", (a - b) / 1048576 }') "
  fi
  if [ "$r" -eq "$REPEAT" ]; then in_dir "$w" post_cleanup "$wl" >>"$lf" 2>&1; fi
  log "$(printf '%-13s %-15s %s s' "$wl" "$t" "$(fmt_secs "${secs:-${SAMPLES[$wl/$t]}}")")"
}

median() { # numbers... -> the median (the mean of the middle two for an even count)
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) exit; if (NR % 2) printf "%.6f", v[(NR + 1) / 2]; else printf "%.6f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ---------------------------------------------------------------- run
for t in "${TARGETS[@]}"; do mount_target "$t"; done
START=$EPOCHREALTIME
for wl in "${WORKLOADS[@]}"; do
  for ((rep = 1; rep <= REPEAT; rep++)); do
    # Each round starts with the next target. The disk of a VM changes speed within seconds
    # (a native 1 GiB write with fsync: 0.7-6.3 s on the 2-core VM, docs/benchmarks.md), and a
    # fixed order charged a slow spell after one target's writes to the next one every round.
    for ((i = 0; i < ${#TARGETS[@]}; i++)); do
      run_one "$wl" "${TARGETS[(i + rep - 1) % ${#TARGETS[@]}]}" "$rep"
    done
  done
  for t in "${TARGETS[@]}"; do
    case "${SAMPLES[$wl/$t]:-}" in
      error|skipped) RES[$wl/$t]=${SAMPLES[$wl/$t]} ;;
      *) read -r -a xs <<<"${SAMPLES[$wl/$t]:-}"; RES[$wl/$t]=$(median "${xs[@]}") ;;
    esac
  done
  if [ -n "${DELTAS[$wl]:-}" ]; then
    read -r -a xs <<<"${DELTAS[$wl]}"
    STORE_DELTA[$wl]=$(median "${xs[@]}" | awk '{ printf "%.1f", $1 }')
    read -r -a xs <<<"${BCOUNTS[$wl]}"
    BOUNDS[$wl]=$(median "${xs[@]}" | awk '{ printf "%g", $1 }')
  fi
done
TOTAL=$(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')

# ---------------------------------------------------------------- requests (--requests)
# Workloads whose requests overlap (several threads or processes, or asynchronous readahead):
# their floor is not a strict bound.
OVERLAPPING=" git-commit git-status seq-read cargo-build cargo-real npm-install nm-clone nm-status "
declare -A REQS REQ_KINDS
RT_US=""

# trace_fuse on CONNECTION | off: the kernel's fuse_request_send events of one connection into
# the trace buffer (64 MiB a CPU: 2 million requests), or tracing off and the buffer as it was.
trace_fuse() {
  local e="$TRACEFS/events/fuse/fuse_request_send"
  echo 0 >"$TRACEFS/tracing_on"
  if [ "$1" = on ]; then
    [ -n "$TRACE_KB" ] || TRACE_KB=$(cat "$TRACEFS/buffer_size_kb")
    echo 65536 >"$TRACEFS/buffer_size_kb"
    echo >"$TRACEFS/trace"
    echo "connection == $2" >"$e/filter"
    echo 1 >"$e/enable"
    echo 1 >"$TRACEFS/tracing_on"
  else
    echo 0 >"$e/enable"
    echo 0 >"$e/filter"
    if [ -n "$TRACE_KB" ]; then
      echo "${TRACE_KB%% *}" >"$TRACEFS/buffer_size_kb" 2>/dev/null || true
      TRACE_KB=""
    fi
  fi
}

# The caller's cost of one request the daemon answers at once, in microseconds: statx with
# AT_STATX_FORCE_SYNC of one file through the mount (one GETATTR each), less the same natively;
# the median of 3 runs of 20,000 each.
request_cost_us() {
  local n=20000 t f i
  local -a secs
  declare -A med
  for t in native rewindfs; do
    f="$(workdir "$t")/.bench-statx-probe"
    : >"$f"
    secs=()
    for i in 1 2 3; do secs+=("$(python3 "$RUN/bio.py" statx "$f" "$n")"); done
    med[$t]=$(median "${secs[@]}")
    rm -f "$f"
  done
  awk -v m="${med[rewindfs]}" -v nat="${med[native]}" -v n="$n" \
    'BEGIN { printf "%.1f", (m - nat) / n * 1e6 }'
}

# count_requests WORKLOAD CONNECTION: runs it once more through rewindfs, prepared as for the
# timed runs but untimed and without boundaries, and counts the requests the kernel sends.
count_requests() {
  local wl=$1 conn=$2 w lf lost n
  w=$(workdir rewindfs)
  lf="$RUN/logs/$wl.rewindfs.requests.log"
  in_dir "$w" "prep_$wl" >"$lf" 2>&1
  if [ "$ST" -ne 0 ]; then warn "$wl: preparing the counted run failed (log: $lf)"; return; fi
  if [[ $DROP_BEFORE == *" $wl "* ]]; then drop_caches
  elif [[ $DROP_DENTRIES_BEFORE == *" $wl "* ]]; then drop_caches 2
  else sync; fi
  trace_fuse on "$conn"
  COUNTING=1 in_dir "$w" "wl_$wl" >>"$lf" 2>&1
  # Stopped, not yet off: putting the buffer back to its size discards what does not fit in it,
  # so the events are counted first (a buffer never used before reads 7 KiB: 284 events kept).
  echo 0 >"$TRACEFS/tracing_on"
  lost=$(awk '/^overrun:/ { s += $2 } END { print s + 0 }' "$TRACEFS"/per_cpu/cpu*/stats)
  n=$(grep -c ' fuse_request_send: ' "$TRACEFS/trace" || true)
  REQ_KINDS[$wl]=$(grep -o ' opcode [0-9]* ([A-Z_0-9]*)' "$TRACEFS/trace" |
    awk '{ gsub(/[()]|FUSE_/, "", $3); c[$3]++ } END { for (k in c) print c[k], k }' |
    sort -rn | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1 }')
  echo >"$TRACEFS/trace"
  trace_fuse off
  if [ "$ST" -ne 0 ]; then warn "$wl: the counted run failed (log: $lf)"; return; fi
  in_dir "$w" post_cleanup "$wl" >>"$lf" 2>&1
  if [ "$lost" -gt 0 ]; then
    warn "$wl: the trace buffer overran ($lost events lost); its count is a lower bound"
    REQS[$wl]="$n+"
  else
    REQS[$wl]=$n
  fi
  log "$(printf '%-13s %-15s %s requests' "$wl" rewindfs "${REQS[$wl]}")"
}

if [ "$REQUESTS" = 1 ] && [[ " ${TARGETS[*]} " == *" rewindfs "* ]]; then
  stop_boundary_loop
  RT_US=$(request_cost_us)
  log "one request answered at once costs the caller $RT_US us (statx, forced, less native)"
  dev=$(mountpoint -d "$(workdir rewindfs)")
  CONN=$(( (${dev%%:*} << 20) | ${dev#*:} ))  # the kernel's dev_t of the mount's connection
  for wl in "${WORKLOADS[@]}"; do
    case "${SAMPLES[$wl/rewindfs]:-}" in error|skipped|"") continue ;; esac
    count_requests "$wl" "$CONN"
  done
fi

REQ_NOTES=()
if [ -n "$RT_US" ]; then
  REQ_NOTES+=("requests: counted in one more untimed run of each workload through rewindfs (no boundaries); floor = (native s + requests x $RT_US us) / native s, $RT_US us being what one request the daemon answers at once cost the caller in this run (statx with AT_STATX_FORCE_SYNC through the mount, less native): no FUSE filesystem that sends these requests can do better on this kernel; in parentheses where the requests overlap (threads, processes, readahead), not a strict bound")
  for wl in "${WORKLOADS[@]}"; do
    [ -z "${REQ_KINDS[$wl]:-}" ] || REQ_NOTES+=("requests of $wl: ${REQ_KINDS[$wl]}")
  done
fi

# floor WORKLOAD: (native + requests x RT_US) / native, in parentheses where requests overlap.
floor() {
  local n=${REQS[$1]:-} nat=${RES[$1/native]:-} f
  [[ ${n%+} =~ ^[0-9]+$ && $nat =~ ^[0-9.]+$ && -n $RT_US ]] || { echo "-"; return; }
  f=$(awk -v n="${n%+}" -v s="$nat" -v c="$RT_US" \
    'BEGIN { if (s + 0 == 0) print "-"; else printf "%.2fx", (s + n * c / 1e6) / s }')
  if [[ $OVERLAPPING == *" $1 "* ]]; then echo "($f)"; else echo "$f"; fi
}

RSS_NOTE=""
if [[ " ${TARGETS[*]} " == *" rewindfs "* ]]; then
  p=$(daemon_proc)
  if [ -n "$p" ]; then
    RSS_NOTE="rewindfs daemon (pid ${p#/proc/}): peak RSS $(awk '/VmHWM/ { printf "%.1f MiB", $2 / 1024 }' "$p/status"), store $(du -sh "$STORE" | cut -f1)"
    if [ -s "$RUN/rss-after-stat" ]; then
      RSS_NOTE+="; RSS after stat-100k ($N_STAT inodes looked up): $(cat "$RUN/rss-after-stat")"
      if [ -s "$RUN/rss-after-stat-late" ]; then
        RSS_NOTE+=", and $(cat "$RUN/rss-after-stat-late") in its counted run, after every workload"
      fi
    fi
  fi
fi

# ---------------------------------------------------------------- report
ratio() { # secs native
  awk -v a="$1" -v b="$2" 'BEGIN {
    if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/) { print "-"; exit }
    if (b + 0 == 0) { print "inf"; exit }
    printf "%.2fx", a / b }'
}
# round_ratio WORKLOAD TARGET: the median over rounds of target/native in the same round (the
# targets run one after another in each round, so a round's ratio sees the same machine state);
# a single run's ratio, or "-", as `ratio` gives.
round_ratio() {
  local -a ts ns
  read -r -a ts <<<"${SAMPLES[$1/$2]:-}"
  read -r -a ns <<<"${SAMPLES[$1/native]:-}"
  if [ "${#ts[@]}" -lt 2 ] || [ "${#ts[@]}" -ne "${#ns[@]}" ]; then
    ratio "${RES[$1/$2]:-}" "${RES[$1/native]:-}"
    return
  fi
  local -a rs=()
  local i
  for i in "${!ts[@]}"; do
    [[ ${ts[$i]} =~ ^[0-9.]+$ && ${ns[$i]} =~ ^[0-9.]+$ ]] || { echo "-"; return; }
    # A native time of 0 has no ratio: the ratio of the medians, as a single run gives.
    if awk -v b="${ns[$i]}" 'BEGIN { exit !(b + 0 == 0) }'; then
      ratio "${RES[$1/$2]:-}" "${RES[$1/native]:-}"
      return
    fi
    rs+=("$(awk -v a="${ts[$i]}" -v b="${ns[$i]}" 'BEGIN { printf "%.6f", a / b }')")
  done
  median "${rs[@]}" | awk '{ printf "%.2fx", $1 }'
}
table() {
  local hdr="| workload | native s |" sep="| --- | ---: |" t wl row
  for t in "${TARGETS[@]:1}"; do
    hdr+=" $t s | ratio |"; sep+=" ---: | ---: |"
    if [ "$t" = rewindfs ]; then hdr+=" store delta MiB | boundaries |"; sep+=" ---: | ---: |"; fi
    if [ "$t" = rewindfs ] && [ -n "$RT_US" ]; then hdr+=" requests | floor |"; sep+=" ---: | ---: |"; fi
  done
  echo "$hdr"; echo "$sep"
  for wl in "${WORKLOADS[@]}"; do
    row="| $wl | $(fmt_secs "${RES[$wl/native]:--}") |"
    for t in "${TARGETS[@]:1}"; do
      row+=" $(fmt_secs "${RES[$wl/$t]:--}") | $(round_ratio "$wl" "$t") |"
      if [ "$t" = rewindfs ]; then row+=" ${STORE_DELTA[$wl]:--} | ${BOUNDS[$wl]:--} |"; fi
      if [ "$t" = rewindfs ] && [ -n "$RT_US" ]; then row+=" ${REQS[$wl]:--} | $(floor "$wl") |"; fi
    done
    echo "$row"
  done
}
pad() { # align the cells of a markdown table (still valid markdown)
  awk -F'|' '
    { n[NR] = NF; for (i = 2; i < NF; i++) { c = $i; gsub(/^ +| +$/, "", c); cell[NR, i] = c
        l = length(c); if (l > w[i]) w[i] = l } }
    END { for (r = 1; r <= NR; r++) { line = "|"
        for (i = 2; i < n[r]; i++) { c = cell[r, i]
          if (c ~ /^-+:?$/) { d = ""; for (k = 0; k < w[i] - (c ~ /:$/); k++) d = d "-"; if (c ~ /:$/) d = d ":"; c = d }
          if (i == 2) line = line " " sprintf("%-" w[i] "s", c) " |"
          else line = line " " sprintf("%" w[i] "s", c) " |" }
        print line } }'
}
SETTINGS="$N_FILES files / $N_DIRS dirs, $N_EDITS edits over $N_EDIT_FILES files, $SEQ_MB MiB sequential, $N_RAND x 4 KiB random in $RAND_MB MiB"
[ -n "$NPM_PKGS" ] && SETTINGS+=", npm: $NPM_PKGS packages (scripts/bench-npm)"
if selected pytest && [ -z "${SKIP[pytest]:-}" ]; then
  SETTINGS+=", pytest: attrs $ATTRS_VERSION's suite"
  pt_ref="" pt_sum="" pt_same="" pt_diff=""  # each target's summary line, against the first's
  for t in "${TARGETS[@]}"; do
    [ -s "$RUN/pytest.$t.out" ] || continue
    sum=$(tail -n 1 "$RUN/pytest.$t.out" | sed -E 's/=+//g; s/ in [0-9.]+s.*$//; s/^ +| +$//g')
    if [ -z "$pt_ref" ]; then pt_ref=$t pt_sum=$sum
    elif [ "$sum" = "$pt_sum" ]; then pt_same+=" $t"
    else pt_diff+="; DIFFERENT on $t: $sum"; fi
  done
  if [ -n "$pt_ref" ]; then
    NOTES+=("pytest (attrs $ATTRS_VERSION): $pt_ref: $pt_sum${pt_same:+; the same on$pt_same}$pt_diff")
  fi
fi
case "$BOUNDARIES" in
  loop) BOUNDARY_DESC="one before each workload + every ${BOUNDARY_MS} ms during it" ;;
  phase) BOUNDARY_DESC="one before each workload" ;;
  *) BOUNDARY_DESC="off" ;;
esac
TABLE=$(table | pad)
RUNS_DESC="single run"
[ "$REPEAT" -eq 1 ] || RUNS_DESC="median of $REPEAT rounds, each round running every target in turn, starting with the next one each round; ratio: the median of the rounds' ratios"
{
  echo
  echo "$TABLE"
  echo
  echo "seconds per workload ($RUNS_DESC; ratio = target/native, same run); total ${TOTAL}s"
  echo "on: $FS_DESC; $(nproc) cores; Linux $(uname -r)"
  echo "sizes: $SETTINGS"
  [[ " ${TARGETS[*]} " == *" rewindfs "* ]] && echo "rewindfs: $BIN${MOUNT_ARGS:+ ($MOUNT_ARGS)}; checkpoint boundaries: $BOUNDARY_DESC"
  [ -n "$RSS_NOTE" ] && echo "$RSS_NOTE"
  for n in "${REQ_NOTES[@]}"; do echo "$n"; done
  for n in "${NOTES[@]}"; do echo "note: $n"; done
  [ ${#FAILED[@]} -eq 0 ] || echo "FAILED: ${FAILED[*]}"
} | tee "$RUN/report.txt"
if [ -n "$MARKDOWN" ]; then
  {
    echo "# rewindfs benchmark — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "$TABLE"
    echo
    echo "- seconds per workload ($RUNS_DESC); ratio = target ÷ native in the same run; total ${TOTAL}s"
    echo "- filesystem: $FS_DESC; $(nproc) cores; Linux $(uname -r)"
    echo "- sizes: $SETTINGS"
    if [[ " ${TARGETS[*]} " == *" rewindfs "* ]]; then
      echo "- rewindfs: \`$BIN\`${MOUNT_ARGS:+ (mount args: \`$MOUNT_ARGS\`)}, commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO" diff --quiet HEAD 2>/dev/null || echo '+dirty'); checkpoint boundaries: $BOUNDARY_DESC"
    fi
    [ -n "$RSS_NOTE" ] && echo "- $RSS_NOTE"
    for n in "${REQ_NOTES[@]}"; do echo "- $n"; done
    for n in "${NOTES[@]}"; do echo "- note: $n"; done
    [ ${#FAILED[@]} -eq 0 ] || echo "- FAILED: ${FAILED[*]}"
  } >"$MARKDOWN"
  log "markdown written to $MARKDOWN"
fi
[ ${#FAILED[@]} -eq 0 ]
