#!/usr/bin/env bash
# A small scripted agent session to look at with `rewindfs ui`: a project mounted in a temporary
# directory, three turns begun through `rewindfs hook` (as Codex's hooks begin them), each with
# file-tool writes (this shell, registered as the agent) and shell work (its children).
#   bash scripts/demo-ui.sh            # then: cd <the printed directory> && rewindfs ui
#   REWINDFS=target/debug/rewindfs bash scripts/demo-ui.sh
# `rewindfs umount <dir>` ends it.
set -euo pipefail
rw=$(command -v "${REWINDFS:-rewindfs}" || true)
[ -n "$rw" ] || { echo "demo-ui: no rewindfs binary (set REWINDFS=path/to/rewindfs)" >&2; exit 1; }
rw=$(realpath "$rw")
base=$(mktemp -d /tmp/rewindfs-demo.XXXXXX)
mkdir "$base/proj"
printf '# shopping\n- milk\n- bread\n' > "$base/proj/notes.md"
printf 'print("hello")\n' > "$base/proj/app.py"
"$rw" mount "$base/proj" --store "$base/store" >/dev/null
cd "$base/proj" # the mount, not the directory underneath
"$rw" agent $$ --session demo-session
turn() { # N PROMPT
  printf '{"hook_event_name":"UserPromptSubmit","session_id":"demo-session","turn_id":"demo-turn-%s","prompt":"%s","cwd":"%s"}' \
    "$1" "$2" "$PWD" | "$rw" hook
}
turn 1 "add eggs to the shopping list and a test"
printf '# shopping\n- milk\n- bread\n- eggs\n' > notes.md
mkdir -p tests && printf 'def test_app():\n    assert True\n' > tests/test_app.py
python3 -c 'print("run the tests")' > /dev/null
turn 2 "make the app greet by name"
printf 'import sys\nprint("hello", sys.argv[1])\n' > app.py
sed -i 's/milk/oat milk/' notes.md
turn 3 "clean up the build"
mkdir -p build && echo 'artefact' > build/out.bin
rm -r tests
echo "$base/proj"
