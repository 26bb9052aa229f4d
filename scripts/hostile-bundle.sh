#!/usr/bin/env bash
# Issue 29, row 6: a large bundle of small rows imports in bounded memory. Builds the release
# binary and imports a bundle of SIZE MiB (default 1024) into a real daemon, reporting the
# daemon's peak memory (the test fails above 256 MiB). CI runs the same test with 24 MiB.
# Usage: scripts/hostile-bundle.sh [SIZE_MIB]   (as root: it mounts)
set -euo pipefail
cd "$(dirname "$0")/.."
export REWINDFS_TEST_BUNDLE_MB="${1:-1024}"
cargo test --locked --release --features fault-injection --test all -- --nocapture \
  hostile::a_large_bundle_of_small_rows_imports_in_bounded_memory
