#!/usr/bin/env bash
# Bring up a real single-node Slurm (slurmctld + slurmd + munged) for CI.
#
# Idempotent: if the daemons recorded in the state dir are alive, the
# controller answers and the node is usable, it says so and exits 0.
# Otherwise it stops whatever it recorded before (down.sh), wipes the
# Slurm state/spool dirs and starts everything from cold.
#
# State (logs, state/spool dirs, pid files, env.sh) lives OUTSIDE the
# checkout, in ${HYBRID_CI_STATE:-/var/tmp/hybrid-ci}/slurm/.
# The config goes to the default path /etc/slurm/slurm.conf, so no
# SLURM_CONF is needed; env.sh exports it anyway for clarity.
#
# Tunables (environment):
#   HYBRID_CI_STATE          base state dir            (/var/tmp/hybrid-ci)
#   HYBRID_CI_SLURM_CPUS     CPUs declared for the node (16)
#   HYBRID_CI_SLURM_TIMEOUT  seconds to wait per step   (60)
#   HYBRID_CI_SLURM_BUSY_CPUS CPUs of the node the opt-in "busy" partition may use (2)
#
# The opt-in "busy" partition (jobs that ask for it with --partition=busy) runs at most
# HYBRID_CI_SLURM_BUSY_CPUS one-CPU jobs at once: the rest pend with the reason Resources,
# as on a busy facility. It is created at run time (scontrol create), warm or cold, so
# adding it never restarts the daemons under other tests' jobs; the default partition
# "debug" is unchanged.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${HYBRID_CI_STATE:-/var/tmp/hybrid-ci}/slurm"
CPUS="${HYBRID_CI_SLURM_CPUS:-16}"
TIMEOUT="${HYBRID_CI_SLURM_TIMEOUT:-60}"
BUSY_CPUS="${HYBRID_CI_SLURM_BUSY_CPUS:-2}"
CONF=/etc/slurm/slurm.conf
RUN="$STATE/run"          # pid files of slurmctld/slurmd
LOG="$STATE/log"          # slurmctld.log, slurmd.log
MUNGE_DIR="$STATE/munge"  # munged pid + log (must be owned by munge)
SAVE="$STATE/state"       # StateSaveLocation
SPOOL="$STATE/spool"      # SlurmdSpoolDir
NODE="$(hostname -s)"

T0=$(date +%s.%N)
LAST=$T0
declare -a TIMINGS=()
now() { date +%s.%N; }
mark() {  # mark <label>: record time since the previous mark
    local t; t=$(now)
    TIMINGS+=("$(awk -v a="$LAST" -v b="$t" -v l="$1" 'BEGIN{printf "%-22s %6.2f s", l, b-a}')")
    LAST=$t
}
print_timings() {
    echo "== timings =="
    local l; for l in "${TIMINGS[@]}"; do echo "  $l"; done
    awk -v a="$T0" -v b="$(now)" 'BEGIN{printf "  %-22s %6.2f s\n", "total", b-a}'
}
log() { echo "[slurm-up] $*"; }
fail() {  # fail <message> [logfile...]
    local msg=$1; shift
    echo "[slurm-up] ERROR: $msg" >&2
    local f
    for f in "$@"; do
        if [[ -f $f ]]; then
            echo "---- last 40 lines of $f ----" >&2
            tail -n 40 "$f" >&2 || true
        else
            echo "---- $f: not found ----" >&2
        fi
    done
    exit 1
}
# pid_alive <pidfile> <comm>: the recorded pid exists and is that program
# (guards against a recycled pid after a reboot or a crash).
pid_alive() {
    local pidfile=$1 comm=$2 pid
    [[ -s $pidfile ]] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]]
}
# wait_for <seconds> <command...>: poll every 0.2 s until the command succeeds
wait_for() {
    local limit=$1; shift
    local deadline; deadline=$(( $(date +%s) + limit ))
    until "$@" >/dev/null 2>&1; do
        (( $(date +%s) < deadline )) || return 1
        sleep 0.2
    done
}
ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
node_state() { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1; }
node_idle() { [[ "$(node_state)" == idle ]]; }
# usable: idle, or busy with jobs of an earlier test (never restart under them); sinfo adds
# "+" when the node is in more than one of these at once (e.g. "allocated+": completing too)
node_usable() { [[ "$(node_state)" =~ ^(idle|mixed|allocated|completing)\+?$ ]]; }
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

[[ $(id -u) -eq 0 ]] || fail "must run as root (it installs packages and writes $CONF)"

# ---------------------------------------------------------------- install
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v munged >/dev/null || ! command -v srun >/dev/null; then
    log "installing slurm-wlm munge (log: $LOG/apt.log)"
    mkdir -p "$LOG"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
            slurm-wlm munge >"$LOG/apt.log" 2>&1; then
        # package lists may be missing on a fresh machine
        apt-get -o DPkg::Lock::Timeout=600 update >>"$LOG/apt.log" 2>&1 || true
        apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
            slurm-wlm munge >>"$LOG/apt.log" 2>&1 \
            || fail "apt-get install slurm-wlm munge failed" "$LOG/apt.log"
    fi
fi
mark install

# ---------------------------------------------------------------- config
# RealMemory as slurmd measures it (jobs asking for --mem are rejected without it).
REALMEM=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n1)
[[ -n $REALMEM ]] || fail "could not read RealMemory from 'slurmd -C'"

# The daemons (and srun) listen on loopback alone where this host's name resolves there, as
# NodeAddr and SlurmctldHost do (else on every interface: Slurm binds to what the name
# resolves to, and the node would be unreachable at 127.0.0.1).
LISTEN="# (the daemons listen on every interface: $NODE does not resolve to 127.0.0.1)"
if [[ "$(getent ahostsv4 "$NODE" | awk 'NR == 1 {print $1}')" == 127.0.0.1 ]]; then
    LISTEN="CommunicationParameters=NoCtldInAddrAny,NoInAddrAny"
fi

NEWCONF=$(cat <<EOF
# Written by hybrid ci/slurm/up.sh -- single-node CI cluster. Do not edit.
ClusterName=hybridci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# scheduling passes every 1-2 s (defaults 60 and 30 s): a job whose --begin time has come,
# or that waited for a slot another job freed, starts within seconds, as the tests expect
SchedulerParameters=sched_interval=2,bf_interval=1
ReturnToService=2
MailProg=/bin/true
# declare more CPUs than the hardware has without draining the node
SlurmdParameters=config_overrides
# finished jobs stay visible in 'scontrol show job' for this many seconds
MinJobAge=300
MaxArraySize=4001
MaxJobCount=20000
# seconds between SIGTERM and SIGKILL on scancel / time limit
KillWait=5
InactiveLimit=0
SlurmctldPort=6817
SlurmdPort=6818
$LISTEN
StateSaveLocation=$SAVE
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# four fake GPUs (gres.conf points at empty files in the state dir) so --gres=gpu:N jobs run
GresTypes=gpu
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REALMEM Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)

write_env() {
    cat >"$STATE/env.sh" <<EOF
# Source this before running tests against the CI Slurm (written by ci/slurm/up.sh).
# The config is at the default path; exporting it is harmless and explicit.
export SLURM_CONF=$CONF
export HYBRID_CI_SLURM_STATE=$STATE
export HYBRID_CI_SLURM_PARTITION=debug
export HYBRID_CI_SLURM_BUSY_PARTITION=busy
export HYBRID_CI_SLURM_BUSY_CPUS=$BUSY_CPUS
EOF
}

# The opt-in busy partition: created (or set to BUSY_CPUS) on the running controller. Its
# PriorityTier is below debug's: the scheduler looks at debug's jobs first, so the busy jobs
# that wait for one of its slots never hold the node back from other tests' jobs.
ensure_busy_partition() {
    if scontrol show partition busy >/dev/null 2>&1; then
        scontrol update PartitionName=busy MaxCPUsPerNode="$BUSY_CPUS" PriorityTier=0 \
            State=UP || fail "scontrol update of the busy partition failed" "$LOG/slurmctld.log"
    else
        scontrol create PartitionName=busy Nodes=ALL Default=NO State=UP MaxTime=INFINITE \
            MaxCPUsPerNode="$BUSY_CPUS" PriorityTier=0 \
            || fail "scontrol create of the busy partition failed" "$LOG/slurmctld.log"
    fi
}

# ---------------------------------------------------------------- warm?
# Daemons alive with this configuration: up. Their answers may be slow on a loaded machine
# (every test session runs this script, and other tests' jobs run meanwhile): they get 30 s
# before the pool counts as broken, as a cold start would kill those jobs.
answers() { munge_ok && ctld_up && node_usable; }
if pid_alive "$MUNGE_DIR/munged.pid" munged \
   && pid_alive "$RUN/slurmctld.pid" slurmctld \
   && pid_alive "$RUN/slurmd.pid" slurmd \
   && [[ -f $CONF && "$(cat "$CONF")" == "$NEWCONF" ]] \
   && wait_for 30 answers; then
    mark "warm check"
    ensure_busy_partition
    write_env
    log "already up: munged $(cat "$MUNGE_DIR/munged.pid"), slurmctld $(cat "$RUN/slurmctld.pid"), slurmd $(cat "$RUN/slurmd.pid"); node $NODE $(node_state)"
    log "env: source $STATE/env.sh"
    print_timings
    exit 0
fi

# ---------------------------------------------------------------- cold start
log "cold start (state in $STATE)"
# Stop whatever we started before (only recorded pids; no-op when nothing is up).
"$HERE/down.sh" >/dev/null 2>&1 || true
mark "stop leftovers"

# Ports must be free: a slurmctld/slurmd we did not start would be a conflict.
if command -v ss >/dev/null; then
    busy=$(ss -Htlnp 2>/dev/null | awk '$4 ~ /:(6817|6818)$/' || true)
    [[ -z $busy ]] || fail "ports 6817/6818 are in use by processes this script did not record:
$busy"
fi

mkdir -p "$STATE" "$RUN" "$LOG"
rm -rf "$SAVE" "$SPOOL"
mkdir -p "$SAVE" "$SPOOL"
chmod 0755 "$STATE" "$RUN" "$LOG"
chmod 0700 "$SAVE" "$SPOOL"
for f in "$LOG"/slurmctld.log "$LOG"/slurmd.log; do
    [[ -f $f ]] && mv -f "$f" "$f.prev"
done
mkdir -p /etc/slurm
printf '%s\n' "$NEWCONF" >"$CONF"
chmod 0644 "$CONF"
for i in 0 1 2 3; do : >"$STATE/fakegpu$i"; done
printf 'AutoDetect=off\nName=gpu File=%s/fakegpu[0-3]\n' "$STATE" >/etc/slurm/gres.conf
chmod 0644 /etc/slurm/gres.conf
mark config

# ---------------------------------------------------------------- munge
# munged insists on munge-owned, not group/world-writable dirs for its files.
mkdir -p /run/munge "$MUNGE_DIR"
chown munge:munge /run/munge "$MUNGE_DIR"
chmod 0755 /run/munge
chmod 0700 "$MUNGE_DIR"
if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating /etc/munge/munge.key"
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
[[ -f $MUNGE_DIR/munged.log ]] && mv -f "$MUNGE_DIR/munged.log" "$MUNGE_DIR/munged.log.prev"
rm -f "$MUNGE_DIR/munged.pid"
runuser -u munge -- /usr/sbin/munged \
    --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
    || fail "munged did not start" "$MUNGE_DIR/munged.log"
wait_for "$TIMEOUT" pid_alive "$MUNGE_DIR/munged.pid" munged \
    || fail "munged pid file $MUNGE_DIR/munged.pid did not appear" "$MUNGE_DIR/munged.log"
wait_for "$TIMEOUT" munge_ok \
    || fail "'munge -n | unmunge' fails" "$MUNGE_DIR/munged.log"
mark munged

# ---------------------------------------------------------------- slurmctld
slurmctld -f "$CONF" || fail "slurmctld did not start" "$LOG/slurmctld.log"
wait_for "$TIMEOUT" pid_alive "$RUN/slurmctld.pid" slurmctld \
    || fail "slurmctld is not running (pid file $RUN/slurmctld.pid)" "$LOG/slurmctld.log"
wait_for "$TIMEOUT" ctld_up \
    || fail "'scontrol ping' did not report UP within ${TIMEOUT}s" "$LOG/slurmctld.log"
mark slurmctld

# ---------------------------------------------------------------- slurmd
slurmd -f "$CONF" -N "$NODE" || fail "slurmd did not start" "$LOG/slurmd.log"
wait_for "$TIMEOUT" pid_alive "$RUN/slurmd.pid" slurmd \
    || fail "slurmd is not running (pid file $RUN/slurmd.pid)" "$LOG/slurmd.log"
deadline=$(( $(date +%s) + TIMEOUT ))
resumed=0
until node_idle; do
    st=$(node_state)
    if [[ $resumed -eq 0 && $st =~ (drain|down|fail) ]]; then
        log "node $NODE is '$st'; RESUME"
        scontrol update NodeName="$NODE" State=RESUME || true
        resumed=1
    fi
    if (( $(date +%s) >= deadline )); then
        scontrol show node "$NODE" >&2 || true
        fail "node $NODE not idle within ${TIMEOUT}s (state '${st:-?}')" \
            "$LOG/slurmd.log" "$LOG/slurmctld.log"
    fi
    sleep 0.2
done
mark "slurmd + node idle"

ensure_busy_partition
write_env

# ---------------------------------------------------------------- smoke
out=$(timeout "$TIMEOUT" srun -N1 -n1 -t 1 hostname 2>&1) \
    || fail "smoke test 'srun -N1 hostname' failed: $out" "$LOG/slurmd.log" "$LOG/slurmctld.log"
mark "smoke srun hostname"
log "srun -N1 hostname -> $out"

log "up: munged $(cat "$MUNGE_DIR/munged.pid"), slurmctld $(cat "$RUN/slurmctld.pid"), slurmd $(cat "$RUN/slurmd.pid"); node $NODE $(node_state), CPUs=$CPUS RealMemory=$REALMEM"
log "env: source $STATE/env.sh"
print_timings
