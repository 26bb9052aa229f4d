#!/usr/bin/env bash
# Installs each way of getting rewindfs into a fresh place and uses it there: the installed
# `rewindfs --version`, a real mount -> write -> rewind --scope all -> umount with the installed
# binary, and the installed client (Python: import, binary_path(), status over the socket; Node:
# import, require, binaryPath(), status).
#
#   bash scripts/test-artefacts.sh                # what CI runs (scripts/test.sh, at its end)
#   bash scripts/test-artefacts.sh --dist dist    # the release artefacts scripts/release.sh made
#   ... --cargo-git                               # also `cargo install --git` of this commit
#
# By default it packs the debug binary scripts/test.sh built (target/debug/rewindfs, with the
# test-only fault injection compiled in) into target/artefacts/: a wheel through maturin (whose
# cargo run finds that build up to date), the two npm packages, and a `cargo install --path`
# into a fresh root with the same settings (no rebuild). These test the packaging, not the
# release build, and are never shipped: scripts/release.sh builds the static musl binary without
# that feature and packs it the same way (scripts/package.sh). --cargo-git is a release build
# from scratch in its own target directory (several minutes on 2 cores).
#
# Needs root, /dev/fuse, python3 with venv, npm, and the network to PyPI for maturin (once).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

dist=""
cargo_git=false
while [ $# -gt 0 ]; do
  case $1 in
    --dist)
      dist=$(cd "$2" && pwd)
      shift 2
      ;;
    --cargo-git)
      cargo_git=true
      shift
      ;;
    *)
      echo "usage: scripts/test-artefacts.sh [--dist DIR] [--cargo-git]" >&2
      exit 2
      ;;
  esac
done

[ "$(id -u)" = 0 ] || { echo "test-artefacts.sh: the smoke tests mount: run as root" >&2; exit 1; }
command -v file >/dev/null || { echo "test-artefacts.sh: file is not installed (apt-get install file)" >&2; exit 1; }
(exec 3<>/dev/fuse) 2>/dev/null || { echo "test-artefacts.sh: /dev/fuse is missing (modprobe fuse)" >&2; exit 1; }

work=$(mktemp -d /tmp/rewindfs-artefacts.XXXXXX)
mounted=() # workspaces to unmount if a step fails
cleanup() {
  local m
  for m in ${mounted[@]+"${mounted[@]}"}; do "$repo/target/debug/rewindfs" umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
passed=0
failed=0
ok() {
  echo "ok: $*"
  passed=$((passed + 1))
}
fail() {
  echo "FAILED: $*" >&2
  failed=$((failed + 1))
}
t0=$SECONDS

v=$(bash scripts/package.sh version)

# smoke NAME BINARY [CLIENT_CMD...]: the installed binary mounts a workspace, records a shell's
# writes, rewinds them (scope all) to the mount's checkpoint and unmounts; CLIENT_CMD runs inside
# the mounted workspace (the installed client talking to that daemon).
smoke() {
  local name=$1 bin=$2
  shift 2
  local d="$work/smoke-$name" got uuid
  mkdir -p "$d/ws"
  printf 'one\n' >"$d/ws/f"
  got=$("$bin" --version)
  [ "$got" = "rewindfs $v" ] || { fail "$name: $bin --version said '$got', not 'rewindfs $v'"; return; }
  "$bin" mount "$d/ws" --store "$d/store" || { fail "$name: $bin mount failed"; return; }
  mounted+=("$d/ws")
  # Each step exits the subshell on failure (set -e would not: the subshell's status is tested).
  (
    step() { "$@" || { echo "$name: failed: $*" >&2; exit 1; }; }
    step cd "$d/ws"
    printf 'two\n' >f && printf 'new\n' >g && mkdir sub && printf 'x\n' >sub/x || exit 1
    # Outputs are taken whole before grep -q reads them: with pipefail, a writer that grep -q
    # leaves behind dies of SIGPIPE and fails the pipeline.
    out=$("$bin" log) || exit 1
    grep -q 'external.*sub/x' <<<"$out" || { echo "$name: the log has no external write of sub/x: $out" >&2; exit 1; }
    uuid=$("$bin" list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoints"][0]["uuid"])') || exit 1
    out=$("$bin" rewind "$uuid" --scope all --dry-run) || exit 1
    grep -q 'would change' <<<"$out" || { echo "$name: the dry run changes nothing: $out" >&2; exit 1; }
    step "$bin" rewind "$uuid" --scope all >/dev/null
    step [ "$(cat f)" = one ]
    step [ ! -e g ]
    step [ ! -e sub ]
    if [ $# -gt 0 ]; then step "$@"; fi
  ) || { fail "$name: mount -> write -> rewind --scope all in $d/ws with $bin (or its client)"; "$bin" umount "$d/ws"; return; }
  "$bin" umount "$d/ws" || { fail "$name: $bin umount failed"; return; }
  unset 'mounted[-1]'
  if grep -q " $d/ws " /proc/self/mounts; then fail "$name: $d/ws is still mounted after umount"; return; fi
  ok "$name: $bin --version, mount, write, rewind --scope all, umount${1:+, client}"
}

# --- What to test: the release artefacts, or packs of the debug build.
if [ -n "$dist" ]; then
  tarball="$dist/rewindfs-$v-x86_64-unknown-linux-musl.tar.gz"
  wheel=$(ls "$dist"/rewindfs-"$v"-py3-none-*.whl)
  npm_client="$dist/rewindfs-$v.tgz"
  npm_platform="$dist/rewindfs-linux-x64-$v.tgz"
  (cd "$dist" && sha256sum --quiet -c SHA256SUMS) && ok "dist: SHA256SUMS match" || fail "dist: SHA256SUMS do not match"
else
  bin="$repo/target/debug/rewindfs"
  [ -x "$bin" ] || { echo "test-artefacts.sh: no $bin: build it first (cargo build --bins --features fault-injection, as scripts/test.sh does)" >&2; exit 1; }
  out="$repo/target/artefacts"
  s=$SECONDS
  wheel=$(bash scripts/package.sh wheel "$out" "$bin" --profile dev --features fault-injection)
  { read -r npm_client; read -r npm_platform; } < <(bash scripts/package.sh npm "$out" "$bin")
  echo "packed the debug build in $((SECONDS - s)) s: $(basename "$wheel"), $(basename "$npm_client"), $(basename "$npm_platform")"
fi

# --- The static binary (release tarball).
if [ -n "$dist" ]; then
  d="$work/tarball"
  mkdir -p "$d"
  tar -xzf "$tarball" -C "$d"
  b="$d/rewindfs-$v-x86_64-unknown-linux-musl/rewindfs"
  if file "$b" | grep -q 'static'; then ok "tarball: $(file -b "$b" | cut -d, -f1-2,4)"; else fail "tarball: $b is not statically linked: $(file -b "$b")"; fi
  smoke tarball "$b"
fi

# --- cargo install: from this checkout (the build above, reused), or from git (a release build).
d="$work/cargo"
if [ -z "$dist" ]; then
  s=$SECONDS
  if cargo install --quiet --locked --path . --debug --features fault-injection --target-dir target --root "$d" 2>&1; then
    ok "cargo install --path . ($((SECONDS - s)) s)"
    smoke cargo-path "$d/bin/rewindfs"
  else
    fail "cargo install --path ."
  fi
fi
if $cargo_git; then
  rev=$(git rev-parse HEAD)
  s=$SECONDS
  [ -z "$(git status --porcelain --untracked-files=no)" ] || echo "note: --cargo-git builds the commit $rev, not the uncommitted changes"
  if cargo install --quiet --locked --git "file://$repo" --rev "$rev" --root "$d-git" rewindfs 2>&1; then
    ok "cargo install --git file://$repo --rev $rev rewindfs ($((SECONDS - s)) s)"
    smoke cargo-git "$d-git/bin/rewindfs"
  else
    fail "cargo install --git file://$repo --rev $rev rewindfs"
  fi
fi

# --- The wheel, into a fresh venv: `rewindfs` on the venv's PATH, and the client.
d="$work/venv"
if "${PYTHON:-python3}" -m venv "$d" && "$d/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"; then
  ok "pip install $(basename "$wheel") into a fresh venv"
  [ -x "$d/bin/rewindfs" ] && ok "wheel: rewindfs is on the venv's PATH ($d/bin/rewindfs)" || fail "wheel: no $d/bin/rewindfs"
  got=$("$d/bin/python" -I -c 'import rewindfs; print(rewindfs.binary_path())')
  [ "$got" = "$d/bin/rewindfs" ] && ok "wheel: import rewindfs; binary_path() is $got" || fail "wheel: binary_path() is '$got', not $d/bin/rewindfs"
  smoke wheel "$d/bin/rewindfs" "$d/bin/python" -I -c '
import rewindfs
with rewindfs.RewindfsClient() as c:
    assert c.status()["workspace"], c.status()
    assert c.list_checkpoints(), "no checkpoints"
'
else
  fail "pip install $wheel into a fresh venv"
fi

# --- npm: both tarballs into a fresh project (node_modules/.bin/rewindfs), and globally into a
# fresh prefix (PREFIX/bin/rewindfs). --offline: the per-platform package must come from its
# tarball, never from a registry.
npm_flags=(--offline --no-audit --no-fund --loglevel=error)
d="$work/npm-project"
mkdir -p "$d"
if (cd "$d" && npm init -y >/dev/null && npm install "${npm_flags[@]}" "$npm_platform" "$npm_client" >/dev/null); then
  ok "npm install $(basename "$npm_platform") $(basename "$npm_client") into a fresh project"
  grep -q 'rewindfs-linux-x64@.*deduped' <<<"$(cd "$d" && npm ls rewindfs-linux-x64 --all)" &&
    ok "npm: rewindfs's optional dependency is the per-platform package just installed" ||
    fail "npm: rewindfs's optional dependency rewindfs-linux-x64 is not the one installed: $(cd "$d" && npm ls --all)"
  # The postinstall put the binary in place of the JavaScript launcher (no Node per call).
  file -L "$d/node_modules/.bin/rewindfs" | grep -q ELF &&
    ok "npm: node_modules/.bin/rewindfs is the binary itself (postinstall)" ||
    fail "npm: node_modules/.bin/rewindfs is not the binary: $(file -L "$d/node_modules/.bin/rewindfs")"
  (cd "$d" && node -e 'const r = require("rewindfs"); if (typeof r.RewindfsClient !== "function") process.exit(1)') &&
    ok "npm: require(\"rewindfs\")" || fail "npm: require(\"rewindfs\")"
  # The Agent SDK adapter ships too (package.json exports "./claude"), with its declarations.
  (cd "$d" && node -e 'import("rewindfs/claude").then((m) => { for (const f of ["withRewindfs", "registerCli", "sendPrompt", "toolSpanHooks"]) if (typeof m[f] !== "function") process.exit(1) }, () => process.exit(1))' &&
    [ -f node_modules/rewindfs/claude.d.ts ]) &&
    ok "npm: import(\"rewindfs/claude\") and its claude.d.ts" || fail "npm: import(\"rewindfs/claude\"): the adapter is not in the package"
  # A module of the project (its imports resolve from where it is), run inside the workspace.
  cat >"$d/check.mjs" <<'JS'
import { RewindfsClient, binaryPath } from "rewindfs";
if (!binaryPath().endsWith("/node_modules/rewindfs-linux-x64/rewindfs")) throw new Error(binaryPath());
const c = await RewindfsClient.connect();
const s = await c.status();
if (!s.workspace) throw new Error(JSON.stringify(s));
c.close();
JS
  smoke npm "$d/node_modules/.bin/rewindfs" node "$d/check.mjs"
else
  fail "npm install of $npm_platform and $npm_client into a fresh project"
fi
# Globally, without install scripts: `rewindfs` is the JavaScript launcher (bin/rewindfs.js).
d="$work/npm-global"
if npm install -g --ignore-scripts --prefix "$d" "${npm_flags[@]}" "$npm_platform" "$npm_client" >/dev/null; then
  ok "npm install -g --ignore-scripts (a fresh prefix)"
  file -L "$d/bin/rewindfs" | grep -q 'Node.js script' && ok "npm: without postinstall, rewindfs is the launcher" ||
    fail "npm: $d/bin/rewindfs is not the launcher: $(file -L "$d/bin/rewindfs")"
  smoke npm-global "$d/bin/rewindfs"
else
  fail "npm install -g --prefix $d"
fi

echo "test-artefacts took $((SECONDS - t0)) s"
echo "artefacts: $passed passed, $failed failed"
[ "$failed" = 0 ]
