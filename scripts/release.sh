#!/usr/bin/env bash
# Builds the release artefacts of this checkout into dist/:
#
#   rewindfs-<v>-x86_64-unknown-linux-musl          the binary, static (musl): any Linux x86_64
#   rewindfs-<v>-x86_64-unknown-linux-musl.tar.gz   it, with README.md and LICENSE, in a folder
#   rewindfs-<v>-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.musllinux_1_2_x86_64.whl
#                                                   the Python client with that binary on PATH
#   rewindfs-<v>.tgz, rewindfs-linux-x64-<v>.tgz    npm: the client (and `rewindfs` on PATH), and
#                                                   the per-platform package with the binary
#   SHA256SUMS, <tarball>.sha256                    sha256sum -c checks them
#
# One cargo build (release, no test-only features, debug info stripped); the wheel and the npm
# package carry that same file (scripts/package.sh checks it byte for byte). Then
# `bash scripts/test-artefacts.sh --dist dist` installs each one somewhere fresh and uses it.
#
# Needs (it checks, and says what to run): rustup's x86_64-unknown-linux-musl target, a musl C
# compiler for the bundled SQLite (Debian: musl-tools, which provides musl-gcc), python3 with
# venv (maturin comes from PyPI into target/pkgenv), npm, and `file`.
# --install-prereqs installs the first two (rustup target add; apt-get as root).
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-musl
install=false
case "${1:-}" in
  --install-prereqs) install=true ;;
  "") ;;
  *)
    echo "usage: scripts/release.sh [--install-prereqs]" >&2
    exit 2
    ;;
esac

missing=()
if ! grep -qx "$target" <<<"$(rustup target list --installed 2>/dev/null)"; then
  if $install; then rustup target add "$target"; else missing+=("the Rust target $target: rustup target add $target"); fi
fi
if ! command -v musl-gcc >/dev/null; then
  if $install && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq musl-tools >/dev/null
  else
    missing+=("musl-gcc, the musl C compiler the bundled SQLite is built with: apt-get install musl-tools (Debian/Ubuntu)")
  fi
fi
command -v file >/dev/null || missing+=("file: apt-get install file")
command -v npm >/dev/null || missing+=("npm: it comes with Node >= 20 (https://nodejs.org/en/download)")
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=("python3 with venv: apt-get install python3-venv")
if [ "${#missing[@]}" -gt 0 ]; then
  echo "release.sh: missing (or run scripts/release.sh --install-prereqs for the first two):" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi

v=$(bash scripts/package.sh version)
name="rewindfs-$v-$target"
t0=$SECONDS

# The release profile keeps line tables (debug = 1) for profiling; a shipped binary has none.
# maturin, below, runs cargo with this same environment and so finds the build up to date.
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=debuginfo
export CC_x86_64_unknown_linux_musl=musl-gcc
cargo build --locked --release --target "$target" --bin rewindfs
bin="target/$target/release/rewindfs"
file "$bin" | grep -q 'static' || {
  echo "release.sh: $bin is not statically linked: $(file -b "$bin")" >&2
  exit 1
}
built=$SECONDS

rm -rf dist
mkdir -p "dist/$name"
cp "$bin" "dist/$name"
cp README.md LICENSE "dist/$name/"
tar -C dist --owner=0 --group=0 --numeric-owner -czf "dist/$name.tar.gz" "$name"
rm -r "dist/$name"
cp "$bin" "dist/$name"

# A static binary links no shared library at all, so it meets every manylinux policy as well as
# musllinux: one wheel that pip installs on glibc (Debian 12's pip takes manylinux_2_17) and on
# musl (Alpine) systems.
bash scripts/package.sh wheel dist "$bin" --release --target "$target" --compatibility manylinux2014 musllinux_1_2 >/dev/null
bash scripts/package.sh npm dist "$bin" >/dev/null

(cd dist && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256" &&
  sha256sum -- "$name" "$name.tar.gz" rewindfs-"$v"-*.whl rewindfs-"$v".tgz rewindfs-linux-x64-"$v".tgz >SHA256SUMS)

echo
echo "release.sh: built in $((built - t0)) s, packed in $((SECONDS - built)) s; dist/:"
(cd dist && ls -l --time-style=+ | tail -n +2)
echo "$(file -b "dist/$name" | cut -d, -f1-2,4)"
echo "test them: bash scripts/test-artefacts.sh --dist dist"
