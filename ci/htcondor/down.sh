#!/usr/bin/env bash
# Stop the CI HTCondor pool started by ci/htcondor/up.sh: remove all jobs, stop the recorded
# condor_master, unmount what up.sh mounted under the chroot. The chroot itself stays cached.
# Idempotent: exits 0 when nothing is up.
#
# Environment: HYBRID_CI_STATE (state root, default /var/tmp/hybrid-ci),
#   HYBRID_CI_DOWN_TIMEOUT (seconds to wait after SIGTERM, default 30).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$HERE/common.sh"

DOWN_TIMEOUT="${HYBRID_CI_DOWN_TIMEOUT:-30}"
T0=$(date +%s.%N)

[[ $EUID -eq 0 ]] || die "must run as root (umount)"
if [[ ! -d "$ROOT" ]]; then
    rm -f "$PID_FILE"
    log "no chroot at $ROOT: nothing to stop"
    exit 0
fi

alive() { kill -0 "$1" 2>/dev/null; }

if pid="$(live_master_pid)"; then
    # Empty the queue first, so no job is restarted from the persistent queue at the next start.
    log "removing all jobs"
    timeout 20 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
        "$CHROOT_BIN" "$ROOT" condor_rm -all >/dev/null 2>&1 || true

    log "stopping condor_master (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for (( i = 0; i < DOWN_TIMEOUT * 10; i++ )); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        log "condor_master still alive after ${DOWN_TIMEOUT} s: SIGKILL to its process group"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        for (( i = 0; i < 50; i++ )); do alive "$pid" || break; sleep 0.1; done
    fi
else
    log "no live condor_master recorded"
fi
rm -f "$PID_FILE"

# The daemons run in their own sessions; after a clean shutdown none is left. Anything still
# rooted in OUR chroot (found by its root directory, not by name) is a leftover of this pool.
leftover="$(procs_in_chroot | tr '\n' ' ')"
if [[ -n "${leftover// /}" ]]; then
    log "WARNING: processes left in the chroot, killing them: $leftover"
    for p in $leftover; do
        log "  $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null || true)"
        kill -KILL "$p" 2>/dev/null || true
    done
    sleep 0.5
fi

n=0
while IFS= read -r mp; do
    [[ -n "$mp" ]] || continue
    if umount "$mp" 2>/dev/null || umount -l "$mp"; then
        n=$((n + 1))
    else
        log "WARNING: could not unmount $mp"
    fi
done < <(mounts_under "$ROOT")
if [[ -n "$(mounts_under "$ROOT")" ]]; then
    die "still mounted under $ROOT: $(mounts_under "$ROOT" | tr '\n' ' ')"
fi
log "pool down ($n mount(s) removed) in $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s; chroot kept at $ROOT"
