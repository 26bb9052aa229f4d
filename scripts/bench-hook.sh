#!/usr/bin/env bash
# What `rewindfs hook` adds to each prompt and tool call of the plain Claude Code CLI (issue 20:
# "no more than a few tens of milliseconds per prompt"): the wall time of one hook process per
# event, through a real mount and its daemon, with a transcript that grows as a session's does
# (each prompt's entry written after its hook, as the CLI writes it).
#
#   scripts/bench-hook.sh [--bin target/release/rewindfs] [--prompts 50]
#
# Prints, per event, the median and the 90th percentile in milliseconds. Run as root (it mounts).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=target/release/rewindfs
PROMPTS=50
while [ $# -gt 0 ]; do
  case $1 in
    --bin) BIN=${2:?}; shift ;;
    --prompts) PROMPTS=${2:?}; shift ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-hook: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ ! -x "$BIN" ]; then
  echo "bench-hook: building $BIN" >&2
  cargo build --release --locked --bin rewindfs >&2
fi
BIN=$(realpath "$BIN")

work=$(mktemp -d /tmp/rewindfs-bench-hook.XXXXXX)
cleanup() {
  "$BIN" umount "$work/ws" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/ws" "$work/store"
"$BIN" mount "$work/ws" --store "$work/store" >/dev/null
export REWINDFS_SOCKET="$work/store/control.sock"
transcript="$work/transcript.jsonl"
: >"$transcript"

# One hook run: its wall time in microseconds, appended to $work/<event>.
run() { # event json
  local t0 t1
  t0=$EPOCHREALTIME
  (cd "$work/ws" && "$BIN" hook <<<"$2")
  t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d\n", (b - a) * 1e6 }' >>"$work/$1"
}

session=bench-session
for i in $(seq 1 "$PROMPTS"); do
  run prompt "{\"hook_event_name\":\"UserPromptSubmit\",\"session_id\":\"$session\",\"prompt_id\":\"p$i\",\"prompt\":\"prompt $i\",\"transcript_path\":\"$transcript\"}"
  # The CLI writes the prompt's entry after the hook returns.
  u=$(cat /proc/sys/kernel/random/uuid)
  printf '{"type":"user","uuid":"%s","promptId":"p%s","message":{"role":"user","content":"prompt %s"}}\n' "$u" "$i" "$i" >>"$transcript"
  run pre "{\"hook_event_name\":\"PreToolUse\",\"session_id\":\"$session\",\"tool_name\":\"Write\",\"tool_use_id\":\"t$i\",\"tool_input\":{\"file_path\":\"$work/ws/f$i\"},\"transcript_path\":\"$transcript\"}"
  echo "turn $i" >"$work/ws/f$i"
  run post "{\"hook_event_name\":\"PostToolUse\",\"session_id\":\"$session\",\"tool_name\":\"Write\",\"tool_use_id\":\"t$i\",\"tool_input\":{\"file_path\":\"$work/ws/f$i\"},\"transcript_path\":\"$transcript\"}"
  run stop "{\"hook_event_name\":\"Stop\",\"session_id\":\"$session\",\"transcript_path\":\"$transcript\"}"
done

unbound=$(python3 - "$REWINDFS_SOCKET" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b'{"type":"control_request","request_id":"r","request":{"subtype":"list_checkpoints"}}\n')
r = json.loads(s.makefile().readline())["response"]["response"]
print(sum(1 for c in r["checkpoints"] if c["kind"] == "message" and not c.get("bound", True)))
PY
)
echo "rewindfs hook, $PROMPTS turns ($(basename "$BIN"), $(nproc) CPUs); prompts left unbound: $unbound"
for e in prompt pre post stop; do
  sort -n "$work/$e" | awk -v e="$e" '{ v[NR] = $1 } END {
    printf "  %-7s median %6.1f ms   p90 %6.1f ms\n", e, v[int((NR + 1) / 2)] / 1000, v[int(NR * 0.9)] / 1000 }'
done
