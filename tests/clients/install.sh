#!/usr/bin/env bash
# Installs the real Claude clients pinned in versions.env, idempotently, into a cache dir:
#   $DIR/venv   python venv with claude-agent-sdk (its wheel bundles the `claude` CLI) + pytest
#   $DIR/npm    npm prefix with @anthropic-ai/claude-agent-sdk (brings the CLI binary through a
#               per-platform optional dependency; @anthropic-ai/claude-code is installed only if
#               that binary is missing)
#   $DIR/agents npm prefix with the Codex CLI and the Gemini CLI (REWINDFS_CLIENTS_SKIP_AGENTS=1
#               skips them)
#   $DIR/env.sh paths for tests: CLAUDE_CLI, CLIENTS_PYTHON, CLIENTS_NODE_MODULES, CLAUDE_CLI_TS,
#               AGENTS_NODE_MODULES
# DIR = ${REWINDFS_CLIENTS_DIR:-<repo>/target/clients}. REWINDFS_CLIENTS_SKIP_TS=1 skips npm.
# REWINDFS_CLIENTS_NEWEST=1 installs the newest published versions instead of the pins.
# Needs python3 (>= 3.10) with venv/ensurepip (installs python3-venv through apt as root if
# missing) and, unless skipped, node >= 18 with npm. Prints where the CLI binary is.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
if [ "${REWINDFS_CLIENTS_NEWEST:-0}" = 1 ]; then
    # The newest published versions instead of the pins (what a repin would pin), for the run of
    # the suite against them: scripts/test.sh puts them in their own cache dir.
    newest="$(bash "$repo/scripts/repin-clients.sh" --newest)" || { echo "install.sh: error: could not ask the registries for the newest versions" >&2; exit 1; }
    eval "$newest"
fi
DIR="${REWINDFS_CLIENTS_DIR:-$repo/target/clients}"
PY="${PYTHON:-python3}"
mkdir -p "$DIR"
log() { printf 'install.sh: %s\n' "$*" >&2; }

# ---- python -------------------------------------------------------------------------------
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        log "python3 has no venv/ensurepip: installing python3-venv"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q python3-venv >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q python3-venv >/dev/null; }
    else
        log "error: $PY lacks the venv module (apt-get install python3-venv)"; exit 1
    fi
fi
venv="$DIR/venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
    rm -rf "$venv"
    "$PY" -m venv "$venv"
fi
have_py="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("claude-agent-sdk"))' 2>/dev/null || true)"
if [ "$have_py" != "$CLAUDE_AGENT_SDK_PY" ] || ! "$venv/bin/python" -c 'import pytest' 2>/dev/null; then
    log "installing claude-agent-sdk==$CLAUDE_AGENT_SDK_PY and pytest into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        "claude-agent-sdk==$CLAUDE_AGENT_SDK_PY" pytest
fi
have_qoder="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("qoder-agent-sdk"))' 2>/dev/null || true)"
if [ "${REWINDFS_CLIENTS_SKIP_QODER:-0}" != 1 ] && [ "$have_qoder" != "$QODER_AGENT_SDK_PY" ]; then
    log "installing qoder-agent-sdk==$QODER_AGENT_SDK_PY into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "qoder-agent-sdk==$QODER_AGENT_SDK_PY"
fi
cli_py="$("$venv/bin/python" -c 'import claude_agent_sdk, os; print(os.path.join(os.path.dirname(claude_agent_sdk.__file__), "_bundled", "claude"))')"
if [ ! -x "$cli_py" ]; then
    log "error: the claude-agent-sdk wheel brought no CLI at $cli_py (no wheel for this platform?)"; exit 1
fi
ver="$("$cli_py" --version 2>/dev/null | awk '{print $1}')"
if [ "$ver" != "$CLAUDE_CODE_CLI" ]; then
    log "error: bundled CLI is $ver, versions.env says $CLAUDE_CODE_CLI"; exit 1
fi

# ---- node ---------------------------------------------------------------------------------
cli_ts=""
node_modules=""
if [ "${REWINDFS_CLIENTS_SKIP_TS:-0}" != 1 ]; then
    command -v node >/dev/null && command -v npm >/dev/null || { log "error: node and npm are needed (or set REWINDFS_CLIENTS_SKIP_TS=1)"; exit 1; }
    npmdir="$DIR/npm"
    mkdir -p "$npmdir"
    node_modules="$npmdir/node_modules"
    want="{\"name\":\"rewindfs-clients\",\"private\":true,\"dependencies\":{\"@anthropic-ai/claude-agent-sdk\":\"$CLAUDE_AGENT_SDK_TS\",\"typescript\":\"$TYPESCRIPT\",\"@types/node\":\"$TYPES_NODE\"}}"
    have_ts="$(node -p "require('$node_modules/@anthropic-ai/claude-agent-sdk/package.json').version" 2>/dev/null || true)"
    have_tsc="$(node -p "require('$node_modules/typescript/package.json').version" 2>/dev/null || true)"
    have_types="$(node -p "require('$node_modules/@types/node/package.json').version" 2>/dev/null || true)"
    if [ "$have_ts" != "$CLAUDE_AGENT_SDK_TS" ] || [ "$have_tsc" != "$TYPESCRIPT" ] || [ "$have_types" != "$TYPES_NODE" ]; then
        log "installing @anthropic-ai/claude-agent-sdk@$CLAUDE_AGENT_SDK_TS, typescript@$TYPESCRIPT and @types/node@$TYPES_NODE into $npmdir"
        printf '%s\n' "$want" > "$npmdir/package.json"
        (cd "$npmdir" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
    fi
    find_ts_cli() {
        local c
        for c in "$node_modules"/@anthropic-ai/claude-agent-sdk-linux-*/claude "$node_modules"/@anthropic-ai/claude-code-linux-*/claude; do
            case "$c" in *musl*) continue ;; esac
            [ -x "$c" ] && { echo "$c"; return; }
        done
        for c in "$node_modules"/@anthropic-ai/claude-agent-sdk-linux-*musl*/claude "$node_modules"/@anthropic-ai/claude-code/bin/claude.exe; do
            [ -x "$c" ] && { echo "$c"; return; }
        done
    }
    cli_ts="$(find_ts_cli || true)"
    if [ -z "$cli_ts" ]; then
        log "the TS SDK brought no CLI binary: installing @anthropic-ai/claude-code@$CLAUDE_CODE_CLI"
        (cd "$npmdir" && npm install --no-audit --no-fund --loglevel=error --no-save "@anthropic-ai/claude-code@$CLAUDE_CODE_CLI" >/dev/null)
        cli_ts="$(find_ts_cli || true)"
    fi
    [ -n "$cli_ts" ] || { log "error: no claude binary under $node_modules"; exit 1; }
    ver="$("$cli_ts" --version 2>/dev/null | awk '{print $1}')"
    [ "$ver" = "$CLAUDE_CODE_CLI" ] || { log "error: TS SDK's CLI is $ver, versions.env says $CLAUDE_CODE_CLI"; exit 1; }
fi

# ---- the agent CLIs beyond Claude (Codex, Gemini) -----------------------------------------
agents_modules=""
if [ "${REWINDFS_CLIENTS_SKIP_AGENTS:-0}" != 1 ]; then
    command -v node >/dev/null && command -v npm >/dev/null || { log "error: node and npm are needed for the Codex and Gemini CLIs (or set REWINDFS_CLIENTS_SKIP_AGENTS=1)"; exit 1; }
    agentsdir="$DIR/agents"
    mkdir -p "$agentsdir"
    agents_modules="$agentsdir/node_modules"
    have_codex="$(node -p "require('$agents_modules/@openai/codex/package.json').version" 2>/dev/null || true)"
    have_gemini="$(node -p "require('$agents_modules/@google/gemini-cli/package.json').version" 2>/dev/null || true)"
    if [ "$have_codex" != "$CODEX_CLI" ] || [ "$have_gemini" != "$GEMINI_CLI" ]; then
        log "installing @openai/codex@$CODEX_CLI and @google/gemini-cli@$GEMINI_CLI into $agentsdir"
        printf '%s\n' "{\"name\":\"rewindfs-agents\",\"private\":true,\"dependencies\":{\"@openai/codex\":\"$CODEX_CLI\",\"@google/gemini-cli\":\"$GEMINI_CLI\"}}" > "$agentsdir/package.json"
        (cd "$agentsdir" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
    fi
    ver="$("$agents_modules/.bin/codex" --version 2>/dev/null | awk '{print $NF}')"
    [ "$ver" = "$CODEX_CLI" ] || { log "error: codex is $ver, versions.env says $CODEX_CLI"; exit 1; }
fi

# Written only when it changes: a cache that is up to date is not written to at all (it may be
# shared, read-only, between work trees).
env_sh="# written by tests/clients/install.sh
CLAUDE_CLI='$cli_py'
CLAUDE_CLI_TS='$cli_ts'
CLIENTS_PYTHON='$venv/bin/python'
CLIENTS_NODE_MODULES='$node_modules'
AGENTS_NODE_MODULES='$agents_modules'"
if [ "$(cat "$DIR/env.sh" 2>/dev/null)" != "$env_sh" ]; then
    printf '%s\n' "$env_sh" > "$DIR/env.sh"
fi
log "ready in $DIR"
echo "CLAUDE_CLI=$cli_py"
[ -z "$cli_ts" ] || echo "CLAUDE_CLI_TS=$cli_ts"
echo "CLIENTS_PYTHON=$venv/bin/python"
