#!/usr/bin/env bash
# Long fuzz run of the control socket against a real daemon (CI runs 15 s of the same test).
# Usage: scripts/fuzz.sh [SECONDS] [SEED]   (a failure prints FUZZ_SEED=... to replay it)
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_SECONDS="${1:-600}"
if [ -n "${2:-}" ]; then export FUZZ_SEED="$2"; fi
cargo test --locked --test all -- --nocapture fuzz::
cargo test --locked --lib -- control::protocol
