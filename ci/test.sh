#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install everything, bring up the REAL HTCondor
# personal pool, the REAL Slurm and the REAL Grid Engine, run ruff, the Sphinx docs (warnings
# are errors) and pytest, and tear the pools down again even when something fails.
# Run it as root (the pools need it):   bash ci/test.sh [pytest arguments]
# HYBRID_TEST_WORKERS (1): with N > 1, the pools' tests run in one pytest beside the rest in N-1
# pytest-xdist workers.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${HYBRID_VENV:-$ROOT/.venv}
STATE=${HYBRID_CI_STATE:-/var/tmp/hybrid-ci}
log() { printf '[ci %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

if [[ $(id -u) != 0 ]]; then
    echo "ci/test.sh must run as root: it installs and starts HTCondor, Slurm and Grid Engine" >&2
    exit 2
fi

start=$SECONDS
log "python environment in $VENV"
[[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -m pip install -q -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -c "import hybrid, htcondor2, dask_gateway_server, kubernetes_validate" \
    || { echo "the install did not complete: see pip's output above" >&2; exit 1; }

pools_pid=""
cleanup() {
    local rc=$?
    # the pools' part of a parallel run, if this script ends before it (it started it)
    if [[ -n $pools_pid ]] && kill -0 "$pools_pid" 2>/dev/null; then
        kill -TERM "$pools_pid" 2>/dev/null || true  # (a background job ignores SIGINT)
        wait "$pools_pid" 2>/dev/null || true
    fi
    log "tearing down the pools"
    bash ci/htcondor/down.sh || true
    bash ci/slurm/down.sh || true
    bash ci/sge/down.sh || true
    exit "$rc"
}
trap cleanup EXIT

log "headless Chromium for the browser tests (Debian's chromium package)"
bash ci/chromium.sh

log "bringing up Slurm"
bash ci/slurm/up.sh
log "bringing up Grid Engine"
bash ci/sge/up.sh
log "bringing up HTCondor"
bash ci/htcondor/up.sh "$VENV"
# shellcheck disable=SC1091
source "$STATE/slurm/env.sh"
# shellcheck disable=SC1091
source "$STATE/htcondor/env.sh"
# shellcheck disable=SC1091
source "$STATE/sge/env.sh"

log "ruff"
"$VENV/bin/ruff" check hybrid tests benchmarks
log "docs (sphinx -W)"
docs_out=$(mktemp -d)
"$VENV/bin/sphinx-build" -W -q -b html docs "$docs_out"
rm -rf "$docs_out"

# HYBRID_TEST_WORKERS=N > 1: two pytest runs side by side: the tests that use a real pool
# (and the docs' examples, which hold fixed ports) one at a time in one (they change the
# pools' queues and count their jobs: `--part pools`, tests/conftest.py), the others in
# another with N-1 pytest-xdist workers (`--part rest`). The arguments go to both; the pools'
# output follows the rest's. Opt-in until a whole parallel run has passed twice here.
WORKERS=${HYBRID_TEST_WORKERS:-1}
pytest=("$VENV/bin/python" -m pytest -p no:cacheprovider -q --durations=30)
if [[ $WORKERS -gt 1 ]]; then
  log "pytest: the pools' tests one at a time, beside the rest with $((WORKERS - 1)) worker(s)"
  pools_log=$(mktemp)
  "${pytest[@]}" --part pools "$@" > "$pools_log" 2>&1 &
  pools_pid=$!
  rest_rc=0
  "${pytest[@]}" --part rest -n "$((WORKERS - 1))" "$@" || rest_rc=$?
  pools_rc=0
  wait "$pools_pid" || pools_rc=$?
  pools_pid=""
  log "the pools' part (exit $pools_rc; the rest: exit $rest_rc)"
  cat "$pools_log"
  rm -f "$pools_log"
  if [[ $rest_rc -ne 0 || $pools_rc -ne 0 ]]; then
    log "failed: the rest exit $rest_rc, the pools' part exit $pools_rc"
    exit 1
  fi
else
  log "pytest"
  "${pytest[@]}" "$@"
fi
log "all done in $((SECONDS - start)) s"
