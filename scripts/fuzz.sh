#!/usr/bin/env bash
# Long fuzz runs (CI runs a few seconds of each):
# - the control socket against a real daemon (tests/all/fuzz.rs);
# - imports of hostile bundles into a store (src/store/bundle/fuzz.rs).
# Usage: scripts/fuzz.sh [SECONDS] [SEED]   (a failure prints FUZZ_SEED=... / BUNDLE_FUZZ_SEED=...
# to replay it)
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_SECONDS="${1:-600}"
export BUNDLE_FUZZ_SECONDS="${1:-600}"
if [ -n "${2:-}" ]; then
  export FUZZ_SEED="$2"
  export BUNDLE_FUZZ_SEED="$2"
fi
cargo test --locked --test all -- --nocapture fuzz::
cargo test --locked --lib -- control::protocol
cargo test --locked --lib -- --nocapture store::bundle::fuzz
