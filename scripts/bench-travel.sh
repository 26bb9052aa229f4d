#!/usr/bin/env bash
# bench-travel.sh — time travel and portability (issue 23), on a fresh ext4 loop filesystem:
#   show / ls   of a checkpoint of a 20k-file tree (ms per file, per listing)
#   fork        of that tree at the checkpoint, against `cp -a` of the same tree, same run
#   export / import of the history, against `tar -c` / `tar -x` of the same blobs
# A benchmark, not a test. Runs as root. Run through `scripts/bench.sh --travel [ARGS]` or
# directly.
#
# Usage: scripts/bench-travel.sh [--quick] [--build] [--no-loop]
#   --quick    2k files, 40 large files (smoke run)
#   --build    cargo build --release if target/release/rewindfs is missing
#   --no-loop  a plain directory instead of an ext4 loop mount
# Environment: REWINDFS_BIN (default target/release/rewindfs), BENCH_DIR (default $TMPDIR or
# /tmp), BENCH_IMG_SIZE (default 8G).
#
# The history: a tree of N files (median ~1.6 KiB, in N/20 directories) plus L large files of
# 512 KiB (whole-file captures); checkpoint C begins; then a tenth of the small files and every
# large file are rewritten, a few hundred removed and added; checkpoint D begins. `show` and
# `ls` look at C; `fork` writes the tree at C; `export` carries everything from C on.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
QUICK=0 BUILD=0 USE_LOOP=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --build) BUILD=1 ;;
    --no-loop) USE_LOOP=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "run as root" >&2; exit 1; }
BIN=${REWINDFS_BIN:-$REPO/target/release/rewindfs}
if [ ! -x "$BIN" ]; then
  [ "$BUILD" = 1 ] || { echo "no $BIN: build it (cargo build --release) or pass --build" >&2; exit 1; }
  (cd "$REPO" && cargo build --release)
fi
if [ "$QUICK" = 1 ]; then N=2000 L=40; else N=20000 L=400; fi

log() { printf '[bench-travel] %s\n' "$*" >&2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

BASE=${BENCH_DIR:-${TMPDIR:-/tmp}}
ROOT=$(mktemp -d "$BASE/rewindfs-travel.XXXXXX")
MNT="$ROOT/mnt"
mkdir -p "$MNT"
LOOPED=0
cleanup() {
  set +e
  for d in "$MNT/fork" "$MNT/work"; do
    if awk -v d="$d" '$5 == d { f = 1 } END { exit !f }' /proc/self/mountinfo; then
      "$BIN" umount "$d" >/dev/null 2>&1 || umount -l "$d"
    fi
  done
  if [ "$LOOPED" = 1 ]; then
    for _ in $(seq 1 40); do umount "$MNT" 2>/dev/null && break; sleep 0.25; done
  fi
  rm -rf "$ROOT"
}
trap cleanup EXIT
if [ "$USE_LOOP" = 1 ] && truncate -s "${BENCH_IMG_SIZE:-8G}" "$ROOT/img" &&
  mkfs.ext4 -q -F "$ROOT/img" && mount -o loop "$ROOT/img" "$MNT"; then
  LOOPED=1
  FS="fresh ext4 loop mount"
else
  FS="plain directory on $(df --output=fstype "$BASE" | tail -1)"
fi
log "$FS in $MNT; $N files + $L large"

W="$MNT/work" S="$MNT/store"
mkdir -p "$W"
python3 - "$W" "$N" "$L" <<'PY'
import os, random, sys
root, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(23)
dirs = [os.path.join(root, f"pkg{i // 40:03d}", f"mod{i % 40:03d}") for i in range(max(1, n // 20))]
for d in dirs:
    os.makedirs(d, exist_ok=True)
words = "let fn pub struct impl match self return value result error buffer index".split()
for i in range(n):
    size = min(16384, max(80, int(rng.lognormvariate(7.4, 0.9))))
    text = []
    while sum(map(len, text)) < size:
        text.append(" ".join(rng.choice(words) for _ in range(8)) + f" {i};\n")
    with open(os.path.join(dirs[i % len(dirs)], f"f{i:05d}.rs"), "w") as f:
        f.write("".join(text))
os.makedirs(os.path.join(root, "assets"), exist_ok=True)
for i in range(big):
    with open(os.path.join(root, "assets", f"a{i:04d}.bin"), "wb") as f:
        f.write(rng.randbytes(512 * 1024))
PY
# A native copy of the tree, for cp -a's baseline.
cp -a "$W" "$MNT/native-tree"
sync

"$BIN" mount "$W" --store "$S" >/dev/null
SOCK="$S/control.sock"
C=$(python3 -c 'import uuid; print(uuid.uuid4())')
D=$(python3 -c 'import uuid; print(uuid.uuid4())')
"$BIN" checkpoint "$C" --session bench --socket "$SOCK" >/dev/null
python3 - "$W" "$N" "$L" <<'PY'
import os, random, sys
root, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs if f.endswith(".rs"))
for p in rng.sample(files, len(files) // 10):
    with open(p, "a") as f:
        f.write("// changed after C\n")
for p in rng.sample(files, len(files) // 50):
    os.remove(p)
for i in range(len(files) // 50):
    with open(os.path.join(os.path.dirname(files[i]), f"new{i:05d}.rs"), "w") as f:
        f.write("new after C\n")
for i in range(big):
    with open(os.path.join(root, "assets", f"a{i:04d}.bin"), "r+b") as f:
        f.write(rng.randbytes(512 * 1024))
PY
"$BIN" checkpoint "$D" --session bench --socket "$SOCK" >/dev/null
sync

# ---- show: a sample of files, changed and unchanged since C
mapfile -t SAMPLE < <(cd "$MNT/native-tree" && find . -name '*.rs' | sort | awk 'NR % int('"$N"' / 50) == 1' | head -50)
SAMPLE+=("./assets/a0000.bin" "./assets/a0001.bin")
show_ms=()
for f in "${SAMPLE[@]}"; do
  t0=$(now)
  "$BIN" show "$C" "$W/${f#./}" --socket "$SOCK" >/dev/null
  t1=$(now)
  show_ms+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) * 1000 }')")
done
SHOW_MED=$(printf '%s\n' "${show_ms[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
SHOW_MAX=$(printf '%s\n' "${show_ms[@]}" | sort -n | tail -1)

# ---- ls: the workspace root, a directory with changes, and every directory (whole tree)
ls_one() { local t0 t1; t0=$(now); "$BIN" ls "$C" "$1" --socket "$SOCK" >/dev/null; t1=$(now); secs "$t0" "$t1"; }
LS_ROOT=$(ls_one "$W")
LS_DIR=$(ls_one "$W/pkg000/mod000")
LS_ASSETS=$(ls_one "$W/assets")
mapfile -t DIRS < <(cd "$MNT/native-tree" && find . -type d | sort)
t0=$(now)
for d in "${DIRS[@]}"; do "$BIN" ls "$C" "$W/${d#./}" --socket "$SOCK" >/dev/null; done
t1=$(now)
LS_ALL=$(secs "$t0" "$t1")

# ---- fork vs cp -a, same run
sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now); cp -a "$MNT/native-tree" "$MNT/cp-copy"; sync; t1=$(now)
CP=$(secs "$t0" "$t1")
sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now); "$BIN" fork "$C" "$MNT/fork" --store "$MNT/fork-store" --socket "$SOCK" >/dev/null; sync; t1=$(now)
FORK=$(secs "$t0" "$t1")
diff -r "$MNT/native-tree" "$MNT/fork" >/dev/null && FORK_OK=identical || FORK_OK=DIFFERS
sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now); cp -a "$W" "$MNT/cp-mounted"; sync; t1=$(now)
CP_MOUNTED=$(secs "$t0" "$t1")

# ---- export / import vs tar of the same blobs
sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now); "$BIN" export --since "$C" "$MNT/h.rwb" --socket "$SOCK" >/dev/null; sync; t1=$(now)
EXPORT=$(secs "$t0" "$t1")
BUNDLE_MB=$(du -m "$MNT/h.rwb" | cut -f1)
sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now); tar -C "$S" -cf "$MNT/blobs.tar" blobs; sync; t1=$(now)
TAR_C=$(secs "$t0" "$t1")
TAR_MB=$(du -m "$MNT/blobs.tar" | cut -f1)
sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now); "$BIN" import "$MNT/h.rwb" --store "$MNT/import-store" >/dev/null; sync; t1=$(now)
IMPORT=$(secs "$t0" "$t1")
mkdir -p "$MNT/untar"
sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now); tar -C "$MNT/untar" -xf "$MNT/blobs.tar"; sync; t1=$(now)
TAR_X=$(secs "$t0" "$t1")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
mbps() { awk -v m="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", m / s; else print "-" }'; }
cat <<EOF
rewindfs time travel, $N files + $L x 512 KiB, $FS
show (per file, ${#SAMPLE[@]} files, CLI process included): median ${SHOW_MED} ms, max ${SHOW_MAX} ms
ls (CLI process included): root ${LS_ROOT} s, a directory of ~20 files ${LS_DIR} s, assets ($L files) ${LS_ASSETS} s; all ${#DIRS[@]} directories one by one ${LS_ALL} s
fork: ${FORK} s ($FORK_OK to the tree at C); cp -a of the same tree: ${CP} s native, ${CP_MOUNTED} s through the mount; fork/cp -a = $(ratio "$FORK" "$CP")
export: ${EXPORT} s for ${BUNDLE_MB} MB ($(mbps "$BUNDLE_MB" "$EXPORT") MB/s); tar -c of the store's blobs: ${TAR_C} s for ${TAR_MB} MB ($(mbps "$TAR_MB" "$TAR_C") MB/s); export/tar time = $(ratio "$EXPORT" "$TAR_C")
import: ${IMPORT} s ($(mbps "$BUNDLE_MB" "$IMPORT") MB/s); tar -x: ${TAR_X} s ($(mbps "$TAR_MB" "$TAR_X") MB/s); import/tar time = $(ratio "$IMPORT" "$TAR_X")
EOF
