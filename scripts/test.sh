#!/usr/bin/env bash
# The test command: formatting, lints, then every test (Rust, the Python SDK's, the TypeScript
# client's). It checks each group of tests' prerequisites first. Outside CI a missing one leaves
# that group out and says `skipped: <tests> (<reason>)`, here and again at the end; with
# CI=true (or CI=1) a missing prerequisite fails the run before anything is built. The tests
# themselves never skip: run directly, a test whose prerequisite is missing fails, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."

strict=false
case "${CI:-}" in true | 1) strict=true ;; esac

skipped=() # "<tests> (<reason>)", printed again at the end
missing=() # what CI lacks
skip() { # skip WHAT REASON
  if $strict; then
    missing+=("$1: $2")
  else
    echo "skipped: $1 ($2)"
    skipped+=("$1 ($2)")
  fi
}
have() { command -v "$1" >/dev/null 2>&1; }
root=false
[ "$(id -u)" = 0 ] && root=true
apt=false
have apt-get && apt=true
# What to run to get a Debian package, as this user.
install_cmd() { if $root; then echo "apt-get install $*"; else echo "sudo apt-get install $*"; fi; }

# --- Rust toolchain: cargo fmt and clippy come as rustup components.
lint=()
if cargo fmt --version >/dev/null 2>&1; then lint+=(fmt); else
  skip "the formatting check" "rustfmt is not installed: rustup component add rustfmt"
fi
if cargo clippy --version >/dev/null 2>&1; then lint+=(clippy); else
  skip "the clippy lints" "clippy is not installed: rustup component add clippy"
fi

# --- The mount tests (tests/all): they mount directly, as root, and their scripts run python3
# and git. Every module that mounts (through `Mounted` or `require_fuse`) is left out together.
test_args=()
fuse=""
if ! $root; then
  fuse="not root: run as root, e.g. sudo bash scripts/test.sh"
elif ! (exec 3<>/dev/fuse) 2>/dev/null; then
  fuse="/dev/fuse is missing: modprobe fuse (package fuse3), or in a container --device /dev/fuse --cap-add SYS_ADMIN"
fi
for c in python3 git; do
  have "$c" || fuse="${fuse:+$fuse; }$c is not installed: $(install_cmd "$c")"
done
if [ -n "$fuse" ]; then
  mods=$(grep -l -E 'Mounted|require_fuse' tests/all/*.rs | xargs -n1 basename | sed 's/\.rs$//' |
    grep -v -x -e support -e main | sort)
  skip "the mount tests: tests/all modules $(echo $mods | tr ' ' ',')" "$fuse"
  for m in $mods; do test_args+=(--skip "$m::"); done
else
  # Tests that need FUSE over io_uring have io_uring in their names.
  if [ ! -e /sys/module/fuse/parameters/enable_uring ]; then
    skip "the io_uring tests (names containing io_uring)" \
      "this kernel has no FUSE over io_uring: it needs Linux >= 6.14 with CONFIG_FUSE_IO_URING"
    test_args+=(--skip io_uring)
  fi
  # The timeouts test lowers the kernel's FUSE request timeout (Linux >= 6.14).
  if [ ! -e /proc/sys/fs/fuse/max_request_timeout ]; then
    skip "the FUSE request timeout test (timeouts::)" \
      "this kernel has no FUSE request timeout (/proc/sys/fs/fuse/max_request_timeout): it needs Linux >= 6.14"
    test_args+=(--skip timeouts::)
  fi
  # The non-root test drops to uid 65534 and mounts through the setuid fusermount3.
  nonroot=""
  if ! have fusermount3; then
    nonroot="fusermount3 is not installed: $(install_cmd fuse3)"
  elif [ ! -u "$(command -v fusermount3)" ]; then
    nonroot="$(command -v fusermount3) is not setuid root: $(install_cmd --reinstall fuse3)"
  elif (($(stat -c '%a' /dev/fuse) % 10 != 6)); then
    nonroot="/dev/fuse is mode $(stat -c '%a' /dev/fuse), not readable and writable by others as \
Debian's udev rule makes it: chmod 0666 /dev/fuse"
  fi
  if [ -n "$nonroot" ]; then
    skip "the non-root test (nonroot::)" "$nonroot"
    test_args+=(--skip nonroot::)
  fi
  # The requests tests count a mount's FUSE requests with the kernel's tracepoint (Linux >= 6.13).
  if [ ! -d /sys/kernel/tracing/events/fuse/fuse_request_send ]; then
    skip "the FUSE request-count tests (requests::)" \
      "no FUSE tracepoints in /sys/kernel/tracing: they need Linux >= 6.13 and tracefs mounted there"
    test_args+=(--skip requests::)
  fi
  # The ui test drives `rewindfs ui` in a real terminal, tmux's.
  if ! have tmux; then
    skip "the terminal ui tests (ui::)" "tmux is not installed: $(install_cmd tmux)"
    test_args+=(--skip ui::)
  fi
fi

# --- The Python SDK's tests run with pytest from a venv under target/ (the fixture itself
# says "skipped" for a missing FUSE, and fails with CI=true).
pyenv="$PWD/target/pyenv"
python="$pyenv/bin/python"
# Makes $pyenv a venv with pytest in it; prints why not.
make_pyenv() {
  "$python" -c 'import pytest' >/dev/null 2>&1 && return
  if ! "$python" -c '' >/dev/null 2>&1; then
    # None yet, or one whose python3 has gone: make it anew.
    rm -rf "$pyenv" 2>/dev/null
    if ! python3 -m venv "$pyenv" >/dev/null 2>&1 && $root && $apt; then
      echo "python3 -m venv failed: installing python3-venv (apt-get) for the Python tests' venv" >&2
      rm -rf "$pyenv"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null &&
        python3 -m venv "$pyenv" >/dev/null 2>&1
    fi
    if ! "$python" -c '' >/dev/null 2>&1; then
      rm -rf "$pyenv" 2>/dev/null
      echo "python3 -m venv $pyenv does not work: $(install_cmd python3-venv)"
      return
    fi
  fi
  "$python" -m pip install -q pytest >&2 ||
    echo "pip could not install pytest into $pyenv (its error is above; offline? then install it from a wheel: $pyenv/bin/pip install pytest-*.whl)"
}
if ! have python3; then
  skip "the Python SDK tests (sdk/python/tests)" "python3 is not installed: $(install_cmd python3 python3-venv)"
  python=""
else
  why=$(make_pyenv)
  if [ -n "$why" ]; then
    skip "the Python SDK tests (sdk/python/tests)" "$why"
    python=""
  fi
fi

# --- The remote tests (remote::) push to and pull from a local S3 server: moto, from PyPI, in a
# venv under target/ (scripts/s3-test-server.sh installs it the first time).
if ! have python3; then
  skip "the remote tests (remote::)" "python3 is not installed: $(install_cmd python3 python3-venv)"
  test_args+=(--skip remote::)
elif ! s3_err=$(bash scripts/s3-test-server.sh install 2>&1); then
  skip "the remote tests (remote::)" \
    "the S3 test server (moto) could not be installed into target/s3-venv: $(echo "$s3_err" | tail -n 1) (python3-venv, and PyPI reachable, are needed once)"
  test_args+=(--skip remote::)
fi

# --- The TypeScript client's tests need Node >= 20 (its package.json's engines).
node_ok=false
if ! have node; then
  skip "the TypeScript client tests (sdk/typescript/test)" "node is not installed: install Node >= 20 (https://nodejs.org/en/download)"
elif (($(node -p 'process.versions.node.split(".")[0]') < 20)); then
  skip "the TypeScript client tests (sdk/typescript/test)" \
    "node $(node --version) is older than 20: install Node >= 20 (https://nodejs.org/en/download; Debian 12's nodejs is 18)"
else
  node_ok=true
fi

# --- The real Claude clients (tests/clients): the Claude Code CLI and the Agent SDKs pinned in
# tests/clients/versions.env, installed from PyPI and npm by tests/clients/install.sh into
# ${REWINDFS_CLIENTS_DIR:-target/clients} (a cache: a few seconds once there; the first time a
# minute or two, with network). They run against a scripted Messages API on loopback, through a
# mount, so they need what the mount tests need; the TypeScript SDK needs node and npm.
clients_python=""
clients_paths="py,ts,hook"
clients_dir="${REWINDFS_CLIENTS_DIR:-$PWD/target/clients}"
if [ -n "$fuse" ]; then
  skip "the real-client tests (tests/clients)" "$fuse"
else
  skip_ts=0
  if ! have node || ! have npm; then
    skip "the TypeScript SDK path of the real-client tests (tests/clients, path ts)" \
      "node and npm are needed: $(install_cmd nodejs npm)"
    skip_ts=1
    clients_paths="py,hook"
  fi
  echo "installing the pinned Claude clients (tests/clients/install.sh) into $clients_dir" >&2
  if why=$(REWINDFS_CLIENTS_DIR="$clients_dir" REWINDFS_CLIENTS_SKIP_TS=$skip_ts bash tests/clients/install.sh 2>&1 >/dev/null); then
    clients_python="$clients_dir/venv/bin/python"
  else
    skip "the real-client tests (tests/clients)" \
      "tests/clients/install.sh failed (offline? no python3-venv?): $(printf '%s\n' "$why" | tail -n 3 | tr '\n' ' ')"
  fi
fi

# --- The Claude Code plugin in the real CLI (tests/clients/test_plugin.py: the CLI from
# tests/clients/install.sh, which downloads it from PyPI once) and the packaging
# (scripts/test-artefacts.sh: a wheel, npm packages and a cargo install of the debug build, each
# installed somewhere fresh and used for a real mount). Both mount, so they need what the mount
# tests need.
plugin_python=""
artefacts=false
if [ -n "$fuse" ]; then
  skip "the Claude Code plugin test (tests/clients/test_plugin.py)" "$fuse"
  skip "the packaging test (scripts/test-artefacts.sh)" "$fuse"
else
  if ! have python3; then
    skip "the Claude Code plugin test (tests/clients/test_plugin.py)" "python3 is not installed: $(install_cmd python3 python3-venv)"
  elif clients=$(REWINDFS_CLIENTS_SKIP_TS=1 bash tests/clients/install.sh 2>&1); then
    export CLAUDE_CLI
    CLAUDE_CLI=$(sed -n 's/^CLAUDE_CLI=//p' <<<"$clients")
    plugin_python=$(sed -n 's/^CLIENTS_PYTHON=//p' <<<"$clients")
  else
    skip "the Claude Code plugin test (tests/clients/test_plugin.py)" \
      "tests/clients/install.sh could not install the Claude Code CLI: $(tail -n 3 <<<"$clients" | tr '\n' ' ')"
  fi
  if ! have npm; then
    skip "the packaging test (scripts/test-artefacts.sh)" "npm is not installed: it comes with Node >= 20 (https://nodejs.org/en/download)"
  elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    skip "the packaging test (scripts/test-artefacts.sh)" "python3 has no venv: $(install_cmd python3-venv)"
  elif ! have file; then
    skip "the packaging test (scripts/test-artefacts.sh)" "file is not installed: $(install_cmd file)"
  elif ! maturin_err=$(bash scripts/package.sh maturin 2>&1 >/dev/null); then
    skip "the packaging test (scripts/test-artefacts.sh)" \
      "maturin could not be installed into target/pkgenv: $(echo "$maturin_err" | tail -n 1) (PyPI must be reachable once)"
  else
    artefacts=true
  fi
fi

if [ "${#missing[@]}" -gt 0 ]; then
  echo "CI=true: these prerequisites are missing (.ci/run installs the packages; outside CI this script leaves those tests out and says so):" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi

for l in "${lint[@]}"; do
  case $l in
    fmt) cargo fmt --all -- --check ;;
    clippy)
      cargo clippy --locked --all-targets --features fault-injection -- -D warnings
      # The build users get (no fault injection) is linted too: its code paths differ.
      cargo clippy --locked --lib --bins -- -D warnings
      ;;
  esac
done
# The README's table of verified client versions is tests/clients/versions.env's.
bash scripts/repin-clients.sh --check
# The API docs build without broken or private links (rustdoc comes with the toolchain).
RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps --features fault-injection

# The test build has the test-only fault injection (src/faults.rs) compiled in.
features=(--features fault-injection)
cargo build --locked --bins "${features[@]}"
# The unit tests need nothing; the integration tests get the skips chosen above (the unit tests
# do not, as `--skip capture::` would also match their `capture::tests::…`).
cargo test --locked --lib --bins "${features[@]}"
# A hung test fails the run in bounded time (a healthy run takes a few minutes) instead of
# holding CI until its own limit.
timeout -k 30 "${TEST_TIMEOUT:-1800}" cargo test --locked --test '*' "${features[@]}" -- ${test_args[@]+"${test_args[@]}"}

export REWINDFS_BIN="$PWD/target/debug/rewindfs"
if [ -n "$python" ]; then
  "$python" -m pytest -q -rs sdk/python/tests
fi
if $node_ok; then
  (cd sdk/typescript && node --test test/)
fi
# The real clients: their recordings still hold (test_sdk_scenarios.py), and rewindfs gives the
# SDK's answers and trees by every integration path (test_rewindfs_real.py), two CLI sessions
# share a tree (test_two_sessions.py), the adapters' types fit the SDK's (test_ts_types.py). The
# plugin's test runs below, once, with its own prerequisites.
if [ -n "$clients_python" ]; then
  REWINDFS_CLIENTS_DIR="$clients_dir" REWINDFS_COMPARE_PATHS="$clients_paths" \
    timeout -k 30 "${TEST_TIMEOUT:-1800}" "$clients_python" -m pytest -q -rs -p no:cacheprovider \
    --ignore=tests/clients/test_plugin.py tests/clients
fi

# The real-client tests against the newest published clients (what `scripts/repin-clients.sh`
# would pin) where they are not the pins: a release that changes what rewindfs must reproduce
# shows here before anyone repins. Their own cache (target/clients-newest); the tests of the
# clients that moved (Claude: the SDK comparison by the Python and plain-CLI paths, and the MCP
# server; Codex or Gemini: their sessions; Qoder: its SDK), to keep the run short.
if [ -n "$clients_python" ] && [ "${REWINDFS_CLIENTS_NEWEST:-1}" != 0 ]; then
  if ! newest=$(bash scripts/repin-clients.sh --newest 2>&1); then
    echo "the registries did not say which clients are newest: $newest" >&2
    $strict && exit 1
  else
    pinned() { sed -n "s/^$1=//p" tests/clients/versions.env; }
    moved() { for k in "$@"; do [ "$(sed -n "s/^$k=//p" <<<"$newest")" = "$(pinned "$k")" ] || return 0; done; return 1; }
    newest_tests=()
    if moved CLAUDE_CODE_CLI CLAUDE_AGENT_SDK_PY; then
      newest_tests+=(tests/clients/test_rewindfs_real.py tests/clients/test_mcp_claude.py)
    fi
    skip_agents=1
    if moved CODEX_CLI GEMINI_CLI; then newest_tests+=(tests/clients/test_agents.py); skip_agents=0; fi
    if moved QODER_AGENT_SDK_PY; then newest_tests+=(tests/clients/test_qoder.py); fi
    if [ "${#newest_tests[@]}" -eq 0 ]; then
      echo "the newest published clients are the pinned ones ($(tr '\n' ' ' <<<"$newest"))"
    else
      newest_dir="${REWINDFS_CLIENTS_NEWEST_DIR:-$PWD/target/clients-newest}"
      echo "newest published clients: $(tr '\n' ' ' <<<"$newest"); running ${newest_tests[*]} against them" >&2
      REWINDFS_CLIENTS_NEWEST=1 REWINDFS_CLIENTS_DIR="$newest_dir" REWINDFS_CLIENTS_SKIP_TS=1 \
        REWINDFS_CLIENTS_SKIP_AGENTS=$skip_agents bash tests/clients/install.sh >/dev/null
      REWINDFS_CLIENTS_DIR="$newest_dir" REWINDFS_COMPARE_PATHS=py,hook \
        AGENTS_NODE_MODULES="$( ((skip_agents)) && echo "$clients_dir/agents/node_modules")" \
        timeout -k 30 "${TEST_TIMEOUT:-1800}" "$newest_dir/venv/bin/python" -m pytest -q -rs -p no:cacheprovider \
        "${newest_tests[@]}"
    fi
  fi
fi

if [ -n "$plugin_python" ]; then
  "$plugin_python" -m pytest -q -rs -p no:cacheprovider tests/clients/test_plugin.py
fi
# Last: it packs target/debug/rewindfs, built above.
if $artefacts; then
  bash scripts/test-artefacts.sh
fi

if [ "${#skipped[@]}" -gt 0 ]; then
  echo
  echo "passed, but these tests did not run:"
  printf '  skipped: %s\n' "${skipped[@]}"
fi
