#!/usr/bin/env bash
# Long crash and rewind torture runs (CI runs the same tests with small counts):
# - CRASH_ROUNDS rounds of SIGKILL at random moments of a write-heavy loop, each followed by
#   a remount, a rewind to the round's checkpoint that must give back the tree, and fsck; the
#   change log after the remount must hold what it showed before the kill, and an entry for
#   every change that completed before it;
# - PROPTEST_CASES random operation sequences per rewind scope (model-based property test).
# Usage: scripts/torture.sh [CRASH_ROUNDS] [PROPTEST_CASES]
set -euo pipefail
cd "$(dirname "$0")/.."
export CRASH_ROUNDS="${1:-200}"
export PROPTEST_CASES="${2:-500}"
cargo test --locked --test all -- --test-threads=2 \
  capture::killing_the_daemon model::
