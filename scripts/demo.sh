#!/usr/bin/env bash
# The main job, end to end on a fresh Debian machine (as root, or as a user with fuse3 and a
# /dev/fuse open to all): build rewindfs, mount a sample project in place, let an "agent" change
# it (a tool write, shell commands) while "you" edit a file too, then rewind with the default
# scope (the SDK's: only what the file tools wrote), see the agent scope refuse because of your
# edit, force it, undo, and unmount. It first checks what it needs (Rust >= 1.85, a C compiler,
# FUSE) and says exactly what to install.
# REWINDFS_BIN=path/to/rewindfs skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- Prerequisites: say exactly what to install, before building anything.
need_rust=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo "
rustup_cmd="curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y && . \"\$HOME/.cargo/env\""
problems=()
if [ -z "${REWINDFS_BIN:-}" ]; then
  if ! command -v cargo >/dev/null 2>&1; then
    problems+=("cargo is not installed; rewindfs needs Rust >= $need_rust (Debian 12's own is 1.63). Install it with rustup (needs curl):
      $rustup_cmd")
  else
    have_rust=$(cargo --version | awk '{print $2}')
    if [ "$(printf '%s\n' "$need_rust" "$have_rust" | sort -V | head -1)" != "$need_rust" ]; then
      if command -v rustup >/dev/null 2>&1; then
        how="rustup update stable"
      else
        how="$rustup_cmd
      (rustup installs into ~/.cargo/bin, which must come before $(dirname "$(command -v cargo)") in PATH)"
      fi
      problems+=("$(command -v cargo) is cargo $have_rust; rewindfs needs Rust >= $need_rust (edition 2024). Update it:
      $how")
    fi
  fi
  if ! command -v cc >/dev/null 2>&1; then
    problems+=("there is no C compiler (cc); the build compiles SQLite (rusqlite's bundled copy). Install one:
      ${sudo}apt-get install gcc")
  fi
fi
# Root mounts directly; an ordinary user mounts through the setuid fusermount3.
if [ -n "$sudo" ] && ! command -v fusermount3 >/dev/null 2>&1; then
  problems+=("fusermount3 is not installed (as an ordinary user rewindfs mounts through it; root needs none). Install it:
      sudo apt-get install fuse3")
fi
if [ ! -e /dev/fuse ]; then
  problems+=("/dev/fuse is missing: ${sudo}modprobe fuse; in a container, run it with --device /dev/fuse --cap-add SYS_ADMIN")
elif [ -n "$sudo" ] && { ! [ -r /dev/fuse ] || ! [ -w /dev/fuse ]; }; then
  problems+=("/dev/fuse is not readable and writable by you (mode $(stat -c %a /dev/fuse)); run this as root, or: sudo chmod 0666 /dev/fuse (Debian's default)")
fi
if [ "${#problems[@]}" -gt 0 ]; then
  echo "The demo cannot run yet:" >&2
  for p in "${problems[@]}"; do printf '  - %s\n' "$p" >&2; done
  echo "Then run: bash scripts/demo.sh" >&2
  exit 1
fi

if [ -n "${REWINDFS_BIN:-}" ]; then
  BIN=$(realpath "$REWINDFS_BIN")
else
  cargo build --release --locked
  BIN="$PWD/target/release/rewindfs"
fi

work=$(mktemp -d /tmp/rewindfs-demo.XXXXXX)
proj="$work/proj"
store="$work/store"
cleanup() {
  cd /
  if grep -q " $proj fuse.rewindfs " /proc/self/mounts; then "$BIN" umount "$proj"; fi
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$proj/src"
printf 'def greet(name):\n    return "hello " + name\n' >"$proj/src/app.py"
printf 'def old():\n    pass\n' >"$proj/src/old.py"
printf '# sample project\n' >"$proj/README.md"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
uuid() { cat /proc/sys/kernel/random/uuid; }

say "mount $proj (in place) with its store in $store"
run "$BIN" mount "$proj" --store "$store"
cd "$proj"

turn1=$(uuid)
say "user message 1 begins: $turn1 (the SDK does this before it sends the prompt)"
run "$BIN" checkpoint "$turn1" --session demo

say "the agent works: its own writes are 'tool' (Write/Edit), its children's 'shell'"
(
  "$BIN" agent "$BASHPID" # this subshell is the agent process
  echo '> src/app.py   (a tool write)'
  printf 'def greet(name):\n    return f"hi {name}!"\n' >src/app.py
  echo '$ bash -c "sed -i s/sample/demo/ README.md; mkdir -p node_modules/x ...; rm src/old.py"'
  bash -c 'sed -i "s/sample/demo/" README.md
    mkdir -p node_modules/x && echo "module.exports=1" >node_modules/x/index.js
    rm src/old.py'
  echo "(the agent's turn ends)" # not the last command: bash would exec the one above in place
)
say "meanwhile you edit README.md in your editor (not the agent: 'external')"
echo '>> README.md'
printf 'my own notes\n' >>README.md

say "what changed, by whom (rewindfs log)"
run "$BIN" log

say "the default scope, tool (the SDK's own): only what Write/Edit changed comes back; the shell's work stays"
run "$BIN" rewind "$turn1" --dry-run
run "$BIN" rewind "$turn1"
run cat src/app.py
run ls src node_modules

say "undo that rewind: the files are as they were before it"
run "$BIN" undo
run cat src/app.py

say "the agent scope (tool + shell) refuses: you also changed README.md since message 1"
if run "$BIN" rewind "$turn1" --scope agent; then
  echo "expected a refusal" >&2
  exit 1
fi

say "--force: rewind the agent's work anyway (your line in README.md goes with it)"
run "$BIN" rewind "$turn1" --scope agent --force
run ls -R .
run cat src/app.py README.md

say "undo: everything is back as before the rewind, your notes included"
run "$BIN" undo
run cat README.md
run ls src node_modules

say "checkpoints"
run "$BIN" list

cd /
say "unmount"
run "$BIN" umount "$proj"
echo "done: the directory is plain again"
