#!/usr/bin/env bash
# fuse-trace.sh — what a command costs in FUSE requests: the number of requests per opcode and
# the latency of each (kernel send to reply), with percentiles, from the kernel's
# fuse_request_send / fuse_request_end tracepoints (Linux >= 6.13; needs root and tracefs).
# A diagnostic, not a benchmark: tracing itself slows each request by a few microseconds.
#
# Usage: scripts/fuse-trace.sh [--stalls MS] COMMAND [ARGS...]
#   --stalls MS   also list requests slower than MS milliseconds, with when they started (the
#                 stalls a mean hides: this is how the journal lock behind a third of an rm -rf
#                 was found)
#
# Every FUSE mount's requests are counted while the command runs, not only the command's own.
set -euo pipefail

stalls=""
if [ "${1:-}" = "--stalls" ]; then
  stalls="$2"
  shift 2
fi
[ $# -gt 0 ] || { echo "usage: $0 [--stalls MS] COMMAND [ARGS...]" >&2; exit 2; }

T=/sys/kernel/tracing
[ -d "$T/events" ] || mount -t tracefs nodev "$T" 2>/dev/null || true
if [ ! -d "$T/events/fuse/fuse_request_send" ]; then
  echo "fuse-trace: no FUSE tracepoints in $T (needs root, tracefs and Linux >= 6.13)" >&2
  exit 1
fi

cleanup() {
  echo 0 >"$T/tracing_on"
  echo 0 >"$T/events/fuse/fuse_request_send/enable"
  echo 0 >"$T/events/fuse/fuse_request_end/enable"
}
trap cleanup EXIT

echo 0 >"$T/tracing_on"
echo >"$T/trace"
echo 262144 >"$T/buffer_size_kb"
echo 1 >"$T/events/fuse/fuse_request_send/enable"
echo 1 >"$T/events/fuse/fuse_request_end/enable"
echo 1 >"$T/tracing_on"
start=$EPOCHREALTIME
rc=0
"$@" || rc=$?
end=$EPOCHREALTIME
echo 0 >"$T/tracing_on"

echo "elapsed: $(python3 -c "print(f'{$end - $start:.3f} s')") (exit status $rc)"
grep -v '^#' "$T/trace" | python3 -c '
import collections, re, sys
stall_ms = float(sys.argv[1]) if sys.argv[1] else None
pat = re.compile(r" (\d+\.\d+): fuse_request_(send|end): connection \d+ req (\d+)(?: opcode \d+ \((\w+)\))?")
sent, lat, slow = {}, collections.defaultdict(list), []
for line in sys.stdin:
    m = pat.search(line)
    if not m:
        continue
    t, kind, req, op = float(m.group(1)), m.group(2), m.group(3), m.group(4)
    if kind == "send":
        sent[req] = (t, op)
    elif req in sent:
        t0, op = sent.pop(req)
        us = (t - t0) * 1e6
        lat[op].append(us)
        if stall_ms is not None and us >= stall_ms * 1000:
            slow.append((t0, op, us))
print("%-22s %8s %9s %8s %8s %8s %8s" % ("opcode", "count", "mean us", "p50", "p90", "p99", "total s"))
for op, v in sorted(lat.items(), key=lambda kv: -sum(kv[1])):
    v.sort()
    n = len(v)
    print(f"{op:22s} {n:8d} {sum(v)/n:9.1f} {v[n//2]:8.1f} {v[int(n*.9)]:8.1f} {v[min(n-1, int(n*.99))]:8.1f} {sum(v)/1e6:8.3f}")
if sent:
    print(f"({len(sent)} requests without a reply in the trace: FORGETs, interrupted or still running)")
if stall_ms is not None:
    print(f"{len(slow)} requests took {stall_ms} ms or more, {sum(s[2] for s in slow)/1e6:.3f} s in all:")
    base = slow[0][0] if slow else 0
    for t0, op, us in slow[:50]:
        print(f"  +{t0-base:9.3f} s  {op:20s} {us/1000:8.2f} ms")
' "$stalls"
exit "$rc"
