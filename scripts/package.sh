#!/usr/bin/env bash
# Packs rewindfs for Python and npm; scripts/release.sh (the released artefacts) and
# scripts/test-artefacts.sh (CI's packaging test, from the debug binary already built) use it.
#
#   scripts/package.sh version
#       the version (Cargo.toml's), after checking that every manifest says the same
#   scripts/package.sh wheel OUTDIR EXPECTED_BINARY [maturin build options...]
#       the wheel of sdk/python: the Python client and the binary (maturin, `bin` bindings),
#       then checks that the binary in it is byte for byte EXPECTED_BINARY (the one the cargo
#       build before it made: maturin's own cargo run must have found it up to date)
#   scripts/package.sh npm OUTDIR BINARY
#       npm pack of the client (sdk/typescript, `rewindfs` on PATH through bin/rewindfs.js) and of
#       the per-platform package npm/rewindfs-linux-x64 with BINARY in it
#
# maturin comes from PyPI into a venv under target/ ($MATURIN_VERSION); npm pack needs npm.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
repo=$PWD
# A path given relative to the caller's directory, made absolute.
abs() { case $1 in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac }
MATURIN_VERSION=1.16.0

die() {
  echo "package.sh: $*" >&2
  exit 1
}

version() {
  local v pv
  v=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
  [ -n "$v" ] || die "no version in Cargo.toml"
  for f in sdk/typescript/package.json npm/rewindfs-linux-x64/package.json; do
    pv=$(node -p "require('./$f').version")
    [ "$pv" = "$v" ] || die "$f says version $pv, Cargo.toml $v: make them equal"
  done
  pv=$(node -p "require('./sdk/typescript/package.json').optionalDependencies['rewindfs-linux-x64']")
  [ "$pv" = "$v" ] || die "sdk/typescript/package.json depends on rewindfs-linux-x64 $pv, Cargo.toml is $v: make them equal"
  for f in plugin/.claude-plugin/plugin.json .claude-plugin/marketplace.json; do
    pv=$(node -p "const m=require('./$f'); m.version ?? m.plugins[0].version")
    [ "$pv" = "$v" ] || die "$f says version $pv, Cargo.toml $v: make them equal"
  done
  echo "$v"
}

# A venv with maturin, made once.
maturin_bin() {
  local env=$repo/target/pkgenv
  if ! "$env/bin/maturin" --version 2>/dev/null | grep -qx "maturin $MATURIN_VERSION"; then
    [ -x "$env/bin/python" ] || python3 -m venv "$env" >&2 ||
      die "python3 -m venv failed (Debian: apt-get install python3-venv)"
    "$env/bin/python" -m pip install -q --disable-pip-version-check "maturin==$MATURIN_VERSION" >&2 ||
      die "pip could not install maturin==$MATURIN_VERSION into $env"
  fi
  echo "$env/bin/maturin"
}

wheel() {
  local out expected maturin v whl tmp
  out=$(abs "$1")
  expected=$(abs "$2")
  shift 2
  maturin=$(maturin_bin)
  v=$(version)
  mkdir -p "$out"
  rm -f "$out"/rewindfs-"$v"-*.whl
  (cd sdk/python && "$maturin" build --locked --out "$out" "$@") >&2
  whl=$(ls "$out"/rewindfs-"$v"-*.whl)
  tmp=$(mktemp -d)
  python3 -m zipfile -e "$whl" "$tmp"
  cmp -s "$tmp/rewindfs-$v.data/scripts/rewindfs" "$expected" ||
    die "the binary in $whl is not $expected (maturin rebuilt it with other settings?)"
  [ -f "$tmp/rewindfs/client.py" ] || die "$whl has no Python client (rewindfs/client.py)"
  rm -rf "$tmp"
  echo "$whl"
}

npm_packs() {
  local out bin v stage
  out=$(abs "$1")
  bin=$(abs "$2")
  command -v npm >/dev/null || die "npm is not installed (it comes with Node >= 20: https://nodejs.org/en/download)"
  [ -x "$bin" ] || die "$bin is not an executable"
  v=$(version)
  mkdir -p "$out"
  stage=$repo/target/npm-stage
  rm -rf "$stage" "$out/rewindfs-$v.tgz" "$out/rewindfs-linux-x64-$v.tgz"
  mkdir -p "$stage/rewindfs/bin" "$stage/rewindfs-linux-x64"
  # The client, as its package.json "files" lists them, with the repository's LICENSE.
  cp sdk/typescript/{package.json,index.js,index.d.ts,claude.js,claude.d.ts,binary.js,install.js,README.md} LICENSE "$stage/rewindfs/"
  cp sdk/typescript/bin/rewindfs.js "$stage/rewindfs/bin/"
  cp npm/rewindfs-linux-x64/{package.json,README.md} LICENSE "$stage/rewindfs-linux-x64/"
  install -m 0755 "$bin" "$stage/rewindfs-linux-x64/rewindfs"
  (cd "$stage/rewindfs" && npm pack --silent --pack-destination "$out" >/dev/null)
  (cd "$stage/rewindfs-linux-x64" && npm pack --silent --pack-destination "$out" >/dev/null)
  echo "$out/rewindfs-$v.tgz"
  echo "$out/rewindfs-linux-x64-$v.tgz"
}

case "${1:-}" in
  version) version ;;
  maturin) maturin_bin ;;
  wheel)
    [ $# -ge 3 ] || die "usage: scripts/package.sh wheel OUTDIR EXPECTED_BINARY [maturin build options...]"
    shift
    wheel "$@"
    ;;
  npm)
    [ $# -eq 3 ] || die "usage: scripts/package.sh npm OUTDIR BINARY"
    npm_packs "$2" "$3"
    ;;
  *) die "usage: scripts/package.sh version | maturin | wheel OUTDIR EXPECTED_BINARY [maturin options...] | npm OUTDIR BINARY" ;;
esac
