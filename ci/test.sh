#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install everything, bring up the REAL HTCondor
# personal pool, the REAL Slurm and the REAL Grid Engine, run ruff, the Sphinx docs (warnings
# are errors) and pytest, and tear the pools down again even when something fails.
# Run it as root (the pools need it):   bash ci/test.sh [pytest arguments]
# HYBRID_TEST_WORKERS (3): with N > 1, the rest runs in N-1 pytest-xdist workers and beside it
# the pools' tests, one at a time per lane, lanes side by side where they share no pool
# (ci/parts.sh; HYBRID_POOL_LANES=0: one lane); 1 runs one pytest, every test one after the other.
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

# Python writes its bytecode (a machine may say otherwise: PYTHONDONTWRITEBYTECODE): else
# every pytest run rewrites the assertions of every test module again (5 s of CPU each) and
# every process that imports hybrid compiles it again.
unset PYTHONDONTWRITEBYTECODE

start=$SECONDS
log "python environment in $VENV"
[[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
# uv (from the registry, with pip) installs the rest: the same packages as pip resolves, in
# 15 s instead of pip's 55 s here (downloads side by side); pip if uv cannot be had
pip_quiet() { "$VENV/bin/python" -m pip "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
pip_quiet install -q uv
if [[ -x $VENV/bin/uv ]]; then
    "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -e ".[test]" \
        || pip_quiet install -q -e ".[test]"
else
    pip_quiet install -q --upgrade pip
    pip_quiet install -q -e ".[test]"
fi
"$VENV/bin/python" -c "import hybrid, htcondor2, dask_gateway_server, kubernetes_validate" \
    || { echo "the install did not complete: see pip's output above" >&2; exit 1; }

parts_pid=""
checks_pids=()
cleanup() {
    local rc=$? pid
    for pid in "${checks_pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    if [[ -n $parts_pid ]] && kill -0 "$parts_pid" 2>/dev/null; then
        kill -TERM "$parts_pid" 2>/dev/null || true  # its trap stops both pytest runs
        wait "$parts_pid" 2>/dev/null || true
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

# While the pools come up (mostly waiting on their daemons): ruff, then the docs (Sphinx,
# warnings are errors), and beside them pytest's collection of the whole suite, which
# writes the bytecode every pytest run below reads.
checks=$(mktemp -d)
log "in the background while the pools come up: ruff, the docs (sphinx -W), pytest's collection"
# (each a session of its own, which cleanup stops as a whole)
setsid bash -c '"$1/bin/ruff" check hybrid tests benchmarks \
    && "$1/bin/sphinx-build" -W -q -b html docs "$2/html"' checks "$VENV" "$checks" \
    > "$checks/checks.log" 2>&1 &
checks_pids+=($!)
setsid "$VENV/bin/python" -m pytest -p no:cacheprovider -q --collect-only \
    > "$checks/collect.log" 2>&1 &
checks_pids+=($!)

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

checks_code=0
wait "${checks_pids[0]}" || checks_code=$?
collect_code=0
wait "${checks_pids[1]}" || collect_code=$?
checks_pids=()
log "ruff and the docs (sphinx -W): exit $checks_code"
cat "$checks/checks.log"
if [[ $collect_code != 0 ]]; then
  log "pytest's collection: exit $collect_code"
  tail -n 40 "$checks/collect.log"
fi
rm -rf "$checks"
[[ $checks_code == 0 && $collect_code == 0 ]] || exit 1

# HYBRID_TEST_WORKERS=N > 1 (the default, 3): the rest in N-1 pytest-xdist workers, the pools'
# tests beside it in lanes (ci/parts.sh says how); 1: one pytest, one test after another.
WORKERS=${HYBRID_TEST_WORKERS:-3}
pytest=("$VENV/bin/python" -m pytest -p no:cacheprovider -q --durations=30)
if [[ $WORKERS -gt 1 ]]; then
  bash ci/parts.sh "$WORKERS" "${pytest[@]}" -- "$@" &
  parts_pid=$!
  wait "$parts_pid"  # (interrupted at once by a signal: cleanup stops the parts first)
  parts_pid=""
else
  log "pytest"
  "${pytest[@]}" "$@"
fi
log "all done in $((SECONDS - start)) s"
