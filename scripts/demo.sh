#!/usr/bin/env bash
# The main job, end to end on a fresh Debian machine (as root): install FUSE, build rewindfs,
# mount a sample project in place, let an "agent" change it (a tool write, shell commands),
# rewind, undo, and unmount.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v fusermount3 >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3
fi
cargo build --release --locked
BIN="$PWD/target/release/rewindfs"

work=$(mktemp -d /tmp/rewindfs-demo.XXXXXX)
proj="$work/proj"
store="$work/store"
cleanup() { "$BIN" umount "$proj" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

mkdir -p "$proj/src"
printf 'def greet(name):\n    return "hello " + name\n' > "$proj/src/app.py"
printf '# sample project\n' > "$proj/README.md"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "mount $proj (in place) with its store in $store"
"$BIN" mount "$proj" --store "$store"
cd "$proj"

turn1=$(python3 -c 'import uuid; print(uuid.uuid4())')
say "user message 1 begins: $turn1"
"$BIN" checkpoint "$turn1" --session demo
# The agent: this shell is registered, so its own writes are `tool`, its children's `shell`.
"$BIN" agent $$
printf 'def greet(name):\n    return f"hi {name}!"\n' > src/app.py          # a tool write
bash -c 'sed -i "s/sample/demo/" README.md; mkdir -p node_modules/x && echo "module.exports=1" > node_modules/x/index.js; rm -f src/old.py'

say "what changed (rewindfs log)"
"$BIN" log

say "dry run: rewind everything to message 1"
"$BIN" rewind "$turn1" --scope all --dry-run

say "diff current -> message 1"
"$BIN" diff "$turn1"

say "rewind (scope all)"
"$BIN" rewind "$turn1" --scope all
ls -R . ; cat src/app.py README.md

say "undo the rewind"
"$BIN" undo
cat src/app.py

say "checkpoints"
"$BIN" list

cd /
say "unmount"
"$BIN" umount "$proj"
echo "done: the directory is plain again"
