#!/usr/bin/env bash
# The test command: everything CI runs. Needs root and /dev/fuse for the mount tests
# (they fail, not skip, when CI=true or REQUIRE_FUSE=1 and FUSE is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked --bins --features fault-injection
# A hung test fails the run in bounded time (a healthy run takes a few minutes) instead of
# holding CI until its own limit.
timeout -k 30 "${TEST_TIMEOUT:-1800}" cargo test --locked --all-targets --features fault-injection

export REWINDFS_BIN="$PWD/target/debug/rewindfs"
if [ -d sdk/python/tests ]; then
  python3 -m pytest -q sdk/python/tests
fi
if [ -d sdk/typescript/test ]; then
  (cd sdk/typescript && node --test test/)
fi
