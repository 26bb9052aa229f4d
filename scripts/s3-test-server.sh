#!/usr/bin/env bash
# A local S3-compatible server for the remote tests (tests/all/remote.rs): moto's server, from
# PyPI, in a venv under target/ (installed on first use). It only listens on 127.0.0.1.
#
#   scripts/s3-test-server.sh install          install moto[server] if missing
#   scripts/s3-test-server.sh path             install if missing; print moto_server's path
#   scripts/s3-test-server.sh bucket URL NAME  create bucket NAME on the server at URL
#
# REWINDFS_S3_VENV overrides where the venv lives.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${REWINDFS_S3_VENV:-$PWD/target/s3-venv}"

install() {
  if [ ! -x "$VENV/bin/moto_server" ]; then
    python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install -q 'moto[server]' >&2
  fi
}

case "${1:-}" in
  install) install ;;
  path) install; echo "$VENV/bin/moto_server" ;;
  bucket)
    install
    AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "$VENV/bin/python" - "$2" "$3" <<'PY'
import sys, boto3
boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1").create_bucket(Bucket=sys.argv[2])
PY
    ;;
  *) echo "usage: $0 install | path | bucket URL NAME" >&2; exit 2 ;;
esac
