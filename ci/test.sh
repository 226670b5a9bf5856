#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install everything, bring up the REAL HTCondor
# personal pool, the REAL Slurm and the REAL Grid Engine, run ruff, the Sphinx docs (warnings
# are errors) and pytest, and tear the pools down again even when something fails.
# Run it as root (the pools need it):   bash ci/test.sh [pytest arguments]
# HYBRID_TEST_WORKERS (1): pytest-xdist workers; with 3, one runs the pools' tests, two the rest.
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

cleanup() {
    local rc=$?
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

# HYBRID_TEST_WORKERS > 1: pytest-xdist; the tests that use a real pool run in one worker,
# one at a time (they change the pools' queues and count their jobs: tests/conftest.py groups
# them), the others beside it. Opt-in until a whole parallel run has passed twice here.
WORKERS=${HYBRID_TEST_WORKERS:-1}
parallel=()
if [[ $WORKERS -gt 1 ]]; then parallel=(-n "$WORKERS" --dist loadgroup); fi
log "pytest (${WORKERS} worker(s))"
"$VENV/bin/python" -m pytest -p no:cacheprovider -q --durations=30 "${parallel[@]}" "$@"
log "all done in $((SECONDS - start)) s"
