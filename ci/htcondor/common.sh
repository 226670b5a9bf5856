# shellcheck shell=bash disable=SC2034
# Shared settings and helpers for ci/htcondor/up.sh and down.sh. Sourced, not run.

STATE_DIR="${HYBRID_CI_STATE:-/var/tmp/hybrid-ci}/htcondor"
ROOT="$STATE_DIR/chroot"                 # the cached trixie chroot
LOG_DIR="$STATE_DIR/logs"                # our logs (bootstrap, master stdout)
CONDOR_LOG_DIR="$ROOT/var/log/condor"    # the daemons' own logs
PID_FILE="$STATE_DIR/condor_master.pid"
CLIENT_CONFIG="$STATE_DIR/condor_config"
ENV_FILE="$STATE_DIR/env.sh"
# A shared filesystem, as at a site: this directory is the same one at the same path on the
# host and inside the pool (hybrid's HTCondor job_files: shared reads job files there in place)
SHARED_DIR="$STATE_DIR/shared"
READY_MARK="etc/hybrid-ci-chroot-ready"  # relative to a chroot; written last when building

JOB_USER=hybridjob
JOB_UID=2001
DOMAIN=hybrid.test

CHROOT_BIN="$(command -v chroot || echo /usr/sbin/chroot)"

log() { printf '[htcondor-ci %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The Debian mirror to debootstrap from: HYBRID_CI_DEBIAN_MIRROR, else the host's apt sources.
debian_mirror() {
    if [[ -n "${HYBRID_CI_DEBIAN_MIRROR:-}" ]]; then
        printf '%s\n' "$HYBRID_CI_DEBIAN_MIRROR"; return
    fi
    local m
    # one-line ("deb URL suite ...") and deb822 ("URIs: URL") sources alike
    local apt="${HYBRID_CI_APT_DIR:-/etc/apt}"
    m="$(cat "$apt"/sources.list "$apt"/sources.list.d/*.list "$apt"/sources.list.d/*.sources \
            2>/dev/null | grep -v '^[[:space:]]*#' \
            | grep -oE 'https?://[^[:space:]]+/debian/?([[:space:]]|$)' | head -n1 | tr -d '[:space:]' || true)"
    [[ -n "$m" ]] || die "no Debian mirror in this host's apt sources ($apt/sources.list," \
        "$apt/sources.list.d/): set HYBRID_CI_DEBIAN_MIRROR to one this host can reach"
    printf '%s\n' "$m"
}

# Run a command inside a chroot with a clean environment: the caller may have sourced env.sh,
# and a host CONDOR_CONFIG leaking into the chroot breaks every condor tool in there.
in_chroot() {
    local dir="$1"; shift
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 "$CHROOT_BIN" "$dir" "$@"
}

# Same, ended after $1 seconds: for a query of a running pool, which can block.
in_chroot_within() {
    local secs="$1" dir="$2"; shift 2
    timeout -k 5 "$secs" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
        "$CHROOT_BIN" "$dir" "$@"
}

# Same, as the unprivileged job user.
in_chroot_as_job_user() {
    local dir="$1"; shift
    env -i PATH=/usr/bin:/bin HOME="/home/$JOB_USER" LC_ALL=C.UTF-8 \
        "$CHROOT_BIN" --userspec="$JOB_UID:$JOB_UID" --groups="$JOB_UID" "$dir" "$@"
}

# Mount points at or under $1, deepest first (from /proc/mounts, octal escapes decoded).
mounts_under() {
    local dir mp
    dir="$(readlink -f "$1")"
    while read -r _ mp _; do
        mp="$(printf '%b' "$mp")"
        if [[ "$mp" == "$dir" || "$mp" == "$dir"/* ]]; then
            printf '%s\n' "$mp"
        fi
    done </proc/mounts | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-
}

unmount_all_under() {
    local mp
    while IFS= read -r mp; do
        [[ -n "$mp" ]] || continue
        umount "$mp" 2>/dev/null || umount -l "$mp" || log "WARNING: could not unmount $mp"
    done < <(mounts_under "$1")
}

# The recorded condor_master PID if that process is alive and really a condor_master.
live_master_pid() {
    local pid
    [[ -f "$PID_FILE" ]] || return 1
    pid="$(cat "$PID_FILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'condor_master' || return 1
    printf '%s\n' "$pid"
}

# Processes whose root directory is the chroot (reported, never killed by name).
procs_in_chroot() {
    local p root
    root="$(readlink -f "$ROOT" 2>/dev/null)" || return 0
    for p in /proc/[0-9]*; do
        [[ "$(readlink "$p/root" 2>/dev/null)" == "$root" ]] && printf '%s\n' "${p#/proc/}"
    done
    return 0
}

show_condor_logs() {
    local f
    for f in "$LOG_DIR/master.out" "$CONDOR_LOG_DIR"/{MasterLog,CollectorLog,NegotiatorLog,SchedLog,StartLog}; do
        [[ -f "$f" ]] || continue
        printf '\n===== tail -n 25 %s =====\n' "$f" >&2
        tail -n 25 "$f" >&2
    done
}
