#!/usr/bin/env bash
# Bring up a real HTCondor personal pool (Debian trixie's condor, in a debootstrap chroot) for
# hybrid's CI. Idempotent: reuses the cached chroot and exits 0 if the pool is already up.
#
#   ci/htcondor/up.sh [VENV_DIR...]
#
# Each VENV_DIR (and the Python installation it was made from) is bind-mounted read-only at the
# same path inside the chroot, so jobs can run VENV_DIR/bin/python. Afterwards:
#   source "${HYBRID_CI_STATE:-/var/tmp/hybrid-ci}/htcondor/env.sh"
# points a host-side htcondor2 client at the pool. Stop with ci/htcondor/down.sh.
#
# Environment: HYBRID_CI_STATE (state root, default /var/tmp/hybrid-ci),
#   HYBRID_CI_DEBIAN_MIRROR (default: the Debian mirror of the host's apt sources; none there
#   is an error, never a guessed address),
#   HYBRID_CI_CLIENT_PYTHON (python with htcondor2 for the readiness check; default the
#   checkout's .venv/bin/python), HYBRID_CI_UP_TIMEOUT (seconds, default 120),
#   HYBRID_CI_WARM_TIMEOUT (seconds a running pool has to answer before it is restarted,
#   default 30).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$HERE/common.sh"

REPO_ROOT="$(cd "$HERE/../.." && pwd)"
CLIENT_PY="${HYBRID_CI_CLIENT_PYTHON:-$REPO_ROOT/.venv/bin/python}"
UP_TIMEOUT="${HYBRID_CI_UP_TIMEOUT:-120}"
WARM_TIMEOUT="${HYBRID_CI_WARM_TIMEOUT:-30}"
SUITE=trixie
EXTRA_PACKAGES=(
    # runtime libraries of a host-built (pyenv) CPython's extension modules; most come with condor
    libssl3t64 libffi8 zlib1g liblzma5 libbz2-1.0 libsqlite3-0 libexpat1 libuuid1
    libncursesw6 libreadline8t64 libcrypt1
    procps   # ps/kill for debugging inside the chroot
)

T0=$(date +%s.%N)
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

[[ $EUID -eq 0 ]] || die "must run as root (debootstrap, chroot, mount)"
mkdir -p "$STATE_DIR" "$LOG_DIR"

VENVS=()
for v in "$@"; do
    [[ -x "$v/bin/python" ]] || die "$v is not a virtual environment (no $v/bin/python)"
    VENVS+=("$(readlink -f "$v")")
done

# ---------------------------------------------------------------------------------------------
# 1. The chroot: build once into a temporary directory, rename into place when complete.
# ---------------------------------------------------------------------------------------------
build_chroot() {
    local mirror tmp t
    t=$(date +%s)
    mirror="$(debian_mirror)"
    # leftovers of an interrupted build: unmount first, then delete without crossing mounts
    for tmp in "$STATE_DIR"/chroot.building.*; do
        [[ -d "$tmp" ]] || continue
        log "removing incomplete build $tmp"
        unmount_all_under "$tmp"
        rm -rf --one-file-system "$tmp"
    done
    if [[ -d "$ROOT" ]]; then   # exists but not marked ready: same treatment
        [[ -z "$(procs_in_chroot)" ]] || die "processes are running in the unfinished chroot $ROOT"
        log "removing unfinished chroot $ROOT"
        unmount_all_under "$ROOT"
        rm -rf --one-file-system "$ROOT"
    fi
    if ! command -v debootstrap >/dev/null; then
        log "installing debootstrap on the host"
        DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap >>"$LOG_DIR/bootstrap.log" 2>&1 \
            || die "apt-get install debootstrap failed (see $LOG_DIR/bootstrap.log; run apt-get update?)"
    fi

    rm -f "$STATE_DIR"/tokens.d/*   # tokens signed by an old chroot's key are useless
    tmp="$(mktemp -d "$STATE_DIR/chroot.building.XXXXXX")"
    chmod 0755 "$tmp"   # mktemp makes it 0700: it becomes '/' for the unprivileged job user
    # shellcheck disable=SC2064
    trap "unmount_all_under '$tmp'" EXIT
    log "debootstrap $SUITE from $mirror into $tmp (log: $LOG_DIR/bootstrap.log)"
    debootstrap --variant=minbase "$SUITE" "$tmp" "$mirror" >>"$LOG_DIR/bootstrap.log" 2>&1 \
        || { tail -n 30 "$LOG_DIR/bootstrap.log" >&2; die "debootstrap failed"; }
    log "debootstrap done after $(( $(date +%s) - t )) s; installing condor in the chroot"

    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod 0755 "$tmp/usr/sbin/policy-rc.d"
    mount -t proc proc "$tmp/proc"
    {
        in_chroot "$tmp" apt-get update
        in_chroot "$tmp" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends condor "${EXTRA_PACKAGES[@]}"
        in_chroot "$tmp" apt-get clean
    } >>"$LOG_DIR/bootstrap.log" 2>&1 \
        || { tail -n 30 "$LOG_DIR/bootstrap.log" >&2; die "installing condor in the chroot failed"; }
    umount "$tmp/proc"
    [[ -x "$tmp/usr/sbin/condor_master" ]] || die "condor_master missing after the install"

    # shellcheck disable=SC2016
    in_chroot "$tmp" dpkg-query -W -f='${Version}\n' condor >"$tmp/$READY_MARK"
    trap - EXIT
    mv -T "$tmp" "$ROOT"
    log "chroot ready ($ROOT, condor $(cat "$ROOT/$READY_MARK")) after $(( $(date +%s) - t )) s"
}

if [[ -f "$ROOT/$READY_MARK" && -x "$ROOT/usr/sbin/condor_master" ]]; then
    log "reusing cached chroot $ROOT (condor $(cat "$ROOT/$READY_MARK"))"
else
    build_chroot
fi

# ---------------------------------------------------------------------------------------------
# 2. Per-start setup (cheap, idempotent): user, directories, config, files, mounts.
# ---------------------------------------------------------------------------------------------
if ! in_chroot "$ROOT" getent passwd "$JOB_USER" >/dev/null; then
    in_chroot "$ROOT" groupadd -g "$JOB_UID" "$JOB_USER"
    in_chroot "$ROOT" useradd -u "$JOB_UID" -g "$JOB_UID" -m -s /bin/sh "$JOB_USER"
fi
# From inside the chroot: its /var/run and /var/lock are absolute symlinks (a host-side mkdir
# would land on the host).
in_chroot "$ROOT" install -d -o condor -g condor -m 0755 \
    /var/run/condor /var/lock/condor /var/log/condor /var/lib/condor \
    /var/lib/condor/spool /var/lib/condor/execute
cp /etc/hosts /etc/resolv.conf "$ROOT/etc/" 2>/dev/null || cp /etc/hosts "$ROOT/etc/"

MAIN_CONF="$ROOT/etc/condor/config.d/90-hybrid-ci.conf"
CYCLE_DELAY=1   # NEGOTIATOR_CYCLE_DELAY (also what a reconfigured negotiator must report)
MAIN_BEFORE="$(cat "$MAIN_CONF" 2>/dev/null || true)"
cat >"$MAIN_CONF" <<EOF
# Written by ci/htcondor/up.sh: a single-machine pool for hybrid's CI.
use ROLE : CentralManager
use ROLE : Submit
use ROLE : Execute

CONDOR_HOST = 127.0.0.1
COLLECTOR_HOST = 127.0.0.1:9618
NETWORK_INTERFACE = 127.0.0.1
BIND_ALL_INTERFACES = False
ENABLE_IPV6 = False
UID_DOMAIN = $DOMAIN
FILESYSTEM_DOMAIN = $DOMAIN
TRUST_UID_DOMAIN = True

# '/' is no mount point in a chroot: the starter's private /tmp mount would put every job on hold
MOUNT_UNDER_SCRATCH =

# one partitionable slot of 20 CPUs, so many one-core workers fit on a small CI machine
NUM_CPUS = 20
# four fake GPUs (no device behind them) so request_gpus jobs match; hybrid's GPU pools
# are tested by the resource they advertise, not by a device
MACHINE_RESOURCE_GPUs = fakegpu0, fakegpu1, fakegpu2, fakegpu3

# fast cycles for tests: a negotiation cycle may start 1 s after the last one (5 s until
# 2026-11-27: about 5 s of every test that waits for a match), and the schedd may tell the
# negotiator about new jobs 1 s after its last update
SCHEDD_INTERVAL = 5
SCHEDD_MIN_INTERVAL = 1
NEGOTIATOR_INTERVAL = 1
NEGOTIATOR_CYCLE_DELAY = $CYCLE_DELAY
# the schedd evaluates periodic_remove/hold/release (a lease, a walltime) every 5 s, not 60 s
PERIODIC_EXPR_INTERVAL = 5
UPDATE_INTERVAL = 5
STARTER_UPDATE_INTERVAL = 5

CONDOR_ADMIN =
MAIL = /bin/true
# the startup mips/kflops benchmarks eat the CPU for ~10 s and delay a shutdown until done
RUNBENCHMARKS = False

# FS for tools inside the chroot, IDTOKENS/CLAIMTOBE for the host-side client (FS across
# the chroot boundary fails). CLAIMTOBE trusts whatever the client says: tests only.
SEC_DEFAULT_AUTHENTICATION_METHODS = FS, IDTOKENS, CLAIMTOBE
SEC_CLIENT_AUTHENTICATION_METHODS = FS, IDTOKENS, CLAIMTOBE
ALLOW_READ = *
ALLOW_WRITE = *
EOF

# Opt-in busy behaviour, for the jobs that ask for it only (hybrid's busy-pool tests):
#  - `concurrency_limits = hybrid_ci_busy` in a job: at most HYBRID_CI_BUSY_LIMIT such jobs
#    run at once; the others stay idle, the negotiator saying "concurrency limit
#    hybrid_ci_busy reached" (LastRejMatchReason);
#  - `My.HybridCIStartAfter = <epoch seconds>`: the job does not start before then (START),
#    as Slurm's --begin.
# Jobs without either are matched as before. Evictions are `condor_vacate_job` (or
# Schedd.act(JobAction.Vacate)). A change of this file reaches a running pool by
# condor_reconfig (below), never a restart.
BUSY_CONF="$ROOT/etc/condor/config.d/91-hybrid-ci-busy.conf"
BUSY_LIMIT="${HYBRID_CI_HTCONDOR_BUSY_LIMIT:-2}"
BUSY_TEXT="# Written by ci/htcondor/up.sh: opt-in busy behaviour for hybrid's busy-pool tests.
HYBRID_CI_BUSY_LIMIT = $BUSY_LIMIT
START = (\$(START)) && ((TARGET.HybridCIStartAfter =?= undefined) || (time() >= TARGET.HybridCIStartAfter))"
CONF_CHANGED=0   # (either file changed: a running pool is reconfigured below)
[[ "$MAIN_BEFORE" == "$(cat "$MAIN_CONF")" ]] || CONF_CHANGED=1
if [[ ! -f "$BUSY_CONF" || "$(cat "$BUSY_CONF")" != "$BUSY_TEXT" ]]; then
    printf '%s\n' "$BUSY_TEXT" >"$BUSY_CONF"
    CONF_CHANGED=1
fi

# Mounts (each only if not mounted yet).
mount_once() {   # mount_once TARGET MOUNT-ARGS...
    local target="$1"; shift
    mountpoint -q "$target" || mount "$@" "$target"
}

# Bind SRC read-only (or read-write with a second argument "rw") at the same path inside the
# chroot, making the path traversable there.
bind_same_path() {
    local src dst p mode access="${2:-ro}"
    src="$(readlink -f "$1")"
    dst="$ROOT$src"
    case "$src" in
        /usr/local | /usr/local/*) ;;   # e.g. the python:3.x images' prefix: fine to shadow
        / | /usr | /usr/* | /bin | /bin/* | /sbin | /sbin/* | /lib | /lib/* | /lib64 | /lib64/* \
            | /etc | /etc/* | /proc | /proc/* | /sys | /sys/* | /dev | /dev/* \
            | /var | /tmp | /root | /home | /run | /run/*)
            log "WARNING: not bind-mounting system path $src into the chroot"; return 0 ;;
    esac
    # create from inside the chroot (no symlink escapes), then make each ancestor traversable
    # (e.g. the chroot's own /root is 0700, like the host's)
    in_chroot "$ROOT" mkdir -p "$src"
    p="$(dirname "$src")"
    while [[ "$p" != / ]]; do
        mode="$(in_chroot "$ROOT" stat -c %A "$p")"
        [[ "${mode:9:1}" == [xt] ]] || in_chroot "$ROOT" chmod o+x "$p"
        p="$(dirname "$p")"
    done
    if ! mountpoint -q "$dst"; then
        mount --bind "$src" "$dst"
        if [[ "$access" == ro ]]; then
            mount -o remount,bind,ro "$dst"
            log "bind-mounted $src read-only"
        else
            log "bind-mounted $src read-write"
        fi
    fi
}

mount_once "$ROOT/proc" -t proc proc
mkdir -p "$ROOT/dev/shm"
mount_once "$ROOT/dev/shm" -t tmpfs -o mode=1777,size=1g tmpfs

PREFIXES=()
if [[ ${#VENVS[@]} -eq 0 ]]; then
    if command -v python3 >/dev/null; then
        PREFIXES+=("$(python3 -c 'import sys; print(sys.base_prefix)')")
    fi
else
    for v in "${VENVS[@]}"; do
        PREFIXES+=("$("$v/bin/python" -c 'import sys; print(sys.base_prefix)')")
    done
fi
for p in "${PREFIXES[@]}"; do bind_same_path "$p"; done
for v in "${VENVS[@]}"; do bind_same_path "$v"; done
# the shared filesystem: sticky and world-writable like /tmp, each user makes their own
# directory in it (jobs run as the user the schedd maps the submitter to)
mkdir -p "$SHARED_DIR"
chmod 1777 "$SHARED_DIR"
bind_same_path "$SHARED_DIR" rw

# Fail early and clearly if the job user cannot run a venv's python.
for v in "${VENVS[@]}"; do
    in_chroot_as_job_user "$ROOT" "$v/bin/python" -c 'import ssl, ctypes, zlib, lzma, bz2' \
        || die "uid $JOB_UID cannot run $v/bin/python inside the chroot (permissions? libraries?)"
done

# Host-side client configuration.
mkdir -p "$STATE_DIR/tokens.d" "$LOG_DIR/client"
chmod 0700 "$STATE_DIR/tokens.d"
cat >"$CLIENT_CONFIG" <<EOF
# Written by ci/htcondor/up.sh: host-side client (htcondor2 wheel) for the chroot pool.
CONDOR_HOST = 127.0.0.1
COLLECTOR_HOST = 127.0.0.1:9618
NETWORK_INTERFACE = 127.0.0.1
BIND_ALL_INTERFACES = False
ENABLE_IPV6 = False
UID_DOMAIN = $DOMAIN
FILESYSTEM_DOMAIN = $DOMAIN
TRUST_UID_DOMAIN = True
LOG = $LOG_DIR/client
# FS does not work across the chroot boundary; CLAIMTOBE asserts the job user's identity
# (the schedd refuses jobs owned by root).
SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS, CLAIMTOBE
SEC_DEFAULT_AUTHENTICATION_METHODS = IDTOKENS, CLAIMTOBE
SEC_CLAIMTOBE_USER = $JOB_USER
SEC_TOKEN_DIRECTORY = $STATE_DIR/tokens.d
EOF

cat >"$ENV_FILE" <<EOF
# Written by ci/htcondor/up.sh; source it to talk to the CI HTCondor pool from the host.
export CONDOR_CONFIG=$CLIENT_CONFIG
export HYBRID_CONDOR_STATE=$STATE_DIR
export HYBRID_CONDOR_CHROOT=$ROOT
export HYBRID_CONDOR_LOG_DIR=$CONDOR_LOG_DIR
export HYBRID_CONDOR_JOB_USER=$JOB_USER
export HYBRID_CONDOR_SHARED_DIR=$SHARED_DIR
EOF

# ---------------------------------------------------------------------------------------------
# 3. Start (unless running) and wait until the host client sees a slot and the schedd answers.
# ---------------------------------------------------------------------------------------------
wait_ready() {   # wait_ready PID TIMEOUT
    local pid="$1" limit="$2"
    if [[ -x "$CLIENT_PY" ]] && "$CLIENT_PY" -c 'import htcondor2' 2>/dev/null; then
        # the outer timeout bounds a query that blocks inside the bindings
        CONDOR_CONFIG="$CLIENT_CONFIG" timeout -k 5 $(( limit + 15 )) "$CLIENT_PY" - "$pid" "$limit" <<'PY'
import os, sys, time
import htcondor2

pid, timeout = int(sys.argv[1]), float(sys.argv[2])
deadline, last = time.monotonic() + timeout, "no answer yet"
while time.monotonic() < deadline:
    if not os.path.exists(f"/proc/{pid}"):
        print(f"condor_master (pid {pid}) exited", file=sys.stderr)
        sys.exit(2)
    try:
        slots = htcondor2.Collector().query(htcondor2.AdTypes.Startd, projection=["Name", "Cpus"])
        if slots:
            htcondor2.Schedd().query(constraint="false", projection=["ClusterId"])
            print(f"collector lists {len(slots)} slot(s) "
                  "(" + ", ".join(f"{s['Name']}: {s['Cpus']} cpus" for s in slots) + "); schedd answers")
            sys.exit(0)
        last = "collector answers, no slot yet"
    except Exception as e:  # not up yet
        last = f"{type(e).__name__}: {e}"
    time.sleep(0.5)
print(f"timed out after {timeout:.0f} s; last: {last}", file=sys.stderr)
sys.exit(1)
PY
    else
        log "WARNING: $CLIENT_PY cannot import htcondor2; checking with the chroot's own tools"
        local deadline=$(( $(date +%s) + limit ))
        while (( $(date +%s) < deadline )); do
            kill -0 "$pid" 2>/dev/null || { log "condor_master exited"; return 2; }
            if [[ -n "$(in_chroot_within 20 "$ROOT" condor_status -af Name 2>/dev/null)" ]] \
                && in_chroot_within 20 "$ROOT" condor_q -totals >/dev/null 2>&1; then
                return 0
            fi
            sleep 0.5
        done
        return 1
    fi
}

ensure_token() {   # an IDTOKEN for the job user (needs the running pool's signing key)
    local tok="$STATE_DIR/tokens.d/$JOB_USER"
    [[ -s "$tok" ]] && return 0
    if in_chroot_within 60 "$ROOT" condor_token_create -identity "$JOB_USER@$DOMAIN" >"$tok.tmp" 2>>"$LOG_DIR/token.log"; then
        chmod 0600 "$tok.tmp"   # HTCondor silently ignores token files with looser modes
        mv "$tok.tmp" "$tok"
    else
        rm -f "$tok.tmp"
        log "WARNING: condor_token_create failed (see $LOG_DIR/token.log); the client uses CLAIMTOBE"
    fi
}

if pid="$(live_master_pid)"; then
    if ! wait_ready "$pid" "$WARM_TIMEOUT"; then
        # A running pool that does not answer (a daemon blocked after earlier stops and
        # starts) is restarted once rather than left to hang every test that needs it.
        [[ -z "${HYBRID_CI_HTCONDOR_RESTARTED:-}" ]] \
            || { show_condor_logs; die "condor_master $pid runs but the pool does not answer"; }
        log "WARNING: condor_master $pid runs but the pool did not answer within ${WARM_TIMEOUT} s: restarting it"
        show_condor_logs
        bash "$HERE/down.sh"
        HYBRID_CI_HTCONDOR_RESTARTED=1 exec bash "$HERE/up.sh" "$@"
    fi
    if [[ $CONF_CHANGED == 1 ]]; then   # this script's settings changed: reconfigure
        in_chroot_within 60 "$ROOT" condor_reconfig >/dev/null || die "condor_reconfig failed"
        deadline=$(( $(date +%s) + UP_TIMEOUT ))
        until [[ "$(in_chroot_within 20 "$ROOT" condor_config_val -negotiator HYBRID_CI_BUSY_LIMIT NEGOTIATOR_CYCLE_DELAY 2>/dev/null | tr '\n' ' ')" == "$BUSY_LIMIT $CYCLE_DELAY " ]]; do
            (( $(date +%s) < deadline )) || die "the negotiator did not take the new settings"
            sleep 0.5
        done
        log "settings applied (condor_reconfig)"
    fi
    ensure_token
    log "pool already up (condor_master pid $pid); checked in $(elapsed) s. source $ENV_FILE"
    exit 0
fi
rm -f "$PID_FILE"
stray="$(procs_in_chroot | tr '\n' ' ')"
[[ -z "$stray" ]] || die "processes not started by up.sh run inside $ROOT (pids: $stray); stop them first"

t_start=$(date +%s.%N)
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
    setsid chroot "$ROOT" /usr/sbin/condor_master -f </dev/null >>"$LOG_DIR/master.out" 2>&1 &
pid=$!
echo "$pid" >"$PID_FILE"
log "started condor_master (pid $pid)"
if ! wait_ready "$pid" "$UP_TIMEOUT"; then
    show_condor_logs
    die "the pool did not come up within ${UP_TIMEOUT} s (condor_master pid $pid left running for inspection; ci/htcondor/down.sh stops it)"
fi
ensure_token
start_s="$(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
log "pool up: start-to-ready ${start_s} s, whole up.sh $(elapsed) s. source $ENV_FILE"
