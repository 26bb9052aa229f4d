#!/usr/bin/env bash
# How long `begin_message` takes on the control socket as checkpoints pile up (issue 33 §3: at
# most 1 ms, flat after 10,000 checkpoints). A workspace is mounted (on the directory given, or
# a temporary one: put it on the disk you care about), then N turns run back to back over one
# connection, each a begin_message round trip timed by the client followed by one file write
# (so every checkpoint has a change to flush and a capture). Printed per block of turns: the
# median, p90, p99 and max round trip in ms, then the ratio of the last block's median to the
# first's (flat ≈ 1).
#   bash scripts/bench-begin.sh [--turns N] [--block B] [--dir DIR] [--bin PATH]
# --pause MS waits that long after each turn's write, as a session does between messages (the
# user reading and typing): the store's flusher has then checkpointed the WAL aside, and the
# next commit used to start the WAL anew and pay for its fsync (e.g. --turns 40 --block 20
# --pause 1500). With a pause, each turn also times, each after the same pause, two baselines
# in the same run: a request the daemon answers at once (an unknown subtype: an error reply
# from the socket's own thread, no store, no disk), and a round trip to a Python echo server on
# a Unix socket (no rewindfs at all: what waking this idle machine costs). Three times as long.
# A benchmark, not a test: nothing is asserted; the figures are to be read and recorded.
set -euo pipefail
turns=10000 block=1000 pause=0 dir="" bin="${REWINDFS_BIN:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --turns) turns=$2; shift 2 ;;
    --block) block=$2; shift 2 ;;
    --pause) pause=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    *) echo "bench-begin.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for n in "$turns" "$block" "$pause"; do
  case "$n" in ''|*[!0-9]*) echo "bench-begin.sh: --turns, --block and --pause take a whole number, not '$n'" >&2; exit 2 ;; esac
done
cd "$(dirname "$0")/.."
if [ -z "$bin" ]; then
  cargo build --release --locked --bin rewindfs >/dev/null
  bin=$PWD/target/release/rewindfs
fi
base=${dir:-$(mktemp -d /var/tmp/rewindfs-bench-begin.XXXXXX)}
mkdir -p "$base/proj"
"$bin" mount "$base/proj" --store "$base/store" >/dev/null
trap '"$bin" umount "$base/proj" >/dev/null 2>&1 || true; [ -n "$dir" ] || rm -rf "$base"' EXIT
python3 - "$base/store/control.sock" "$base/proj" "$turns" "$block" "$pause" <<'PY'
import atexit, json, os, shutil, socket, statistics, sys, tempfile, time, uuid
sock_path, proj, turns, block = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
pause = int(sys.argv[5]) / 1000
s = socket.socket(socket.AF_UNIX)
s.connect(sock_path)
r = s.makefile("rb")
def call(subtype, **fields):
    req = {"type": "control_request", "request_id": uuid.uuid4().hex, "request": {"subtype": subtype, **fields}}
    s.sendall(json.dumps(req).encode() + b"\n")
    resp = json.loads(r.readline())["response"]
    if resp.get("subtype") == "error":
        sys.exit(f"bench-begin: {subtype}: {resp.get('error')}")
    return resp
def echo_server():
    # A child process that echoes lines on a Unix socket: the baseline of a round trip.
    # Outside the store, which holds only what rewindfs puts there.
    path = os.path.join(tempfile.mkdtemp(prefix="rewindfs-bench-echo."), "echo.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    atexit.register(shutil.rmtree, os.path.dirname(path), True)
    if os.fork() == 0:
        c, _ = srv.accept()
        f = c.makefile("rb")
        for line in f:
            c.sendall(line)
        os._exit(0)
    srv.close()
    e = socket.socket(socket.AF_UNIX)
    e.connect(path)
    return e, e.makefile("rb")
def timed(f):
    t0 = time.perf_counter()
    f()
    return (time.perf_counter() - t0) * 1000
def unknown():
    req = {"type": "control_request", "request_id": "b", "request": {"subtype": "bench_no_such_request"}}
    s.sendall(json.dumps(req).encode() + b"\n")
    r.readline()
if pause:
    echo, echo_r = echo_server()
    def echoed():
        echo.sendall(b'{"subtype": "echo"}\n')
        echo_r.readline()
blocks = []
times = []
base_unknown, base_echo = [], []
print(f"{'turns':>13}  {'median ms':>9}  {'p90 ms':>7}  {'p99 ms':>7}  {'max ms':>7}")
for i in range(turns):
    t0 = time.perf_counter()
    call("begin_message", session_id="bench", user_message_id=str(uuid.uuid4()))
    times.append((time.perf_counter() - t0) * 1000)
    with open(os.path.join(proj, f"f{i % 100}.txt"), "w") as f:
        f.write(f"turn {i}\n")
    if pause:
        time.sleep(pause)
        base_unknown.append(timed(unknown))
        time.sleep(pause)
        base_echo.append(timed(echoed))
        time.sleep(pause)
    if len(times) == block:
        q = statistics.quantiles(times, n=100)
        blocks.append(statistics.median(times))
        print(f"{i + 2 - block:>6}-{i + 1:<6}  {blocks[-1]:9.3f}  {q[89]:7.3f}  {q[98]:7.3f}  {max(times):7.3f}")
        times = []
if len(blocks) > 1:
    print(f"last block's median / first block's: {blocks[-1] / blocks[0]:.2f}")
if pause:
    m = statistics.median
    print(f"after the same pause, in the same run (medians of {turns}):")
    print(f"  a request the daemon answers at once: {m(base_unknown):.3f} ms")
    print(f"  a Python echo over a Unix socket (no rewindfs): {m(base_echo):.3f} ms")
PY
