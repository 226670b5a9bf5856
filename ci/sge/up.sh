#!/usr/bin/env bash
# Bring up a real single-node Grid Engine (Debian's gridengine 8.1.9: sge_qmaster + sge_execd)
# for CI: one master and execution host (this machine), one queue, one parallel environment.
#
# Idempotent: if the daemons recorded in the state dir are alive, the configuration is the
# one this script writes and the queue answers, it says so ("already up") and exits 0.
# Otherwise it stops whatever it recorded before (down.sh), wipes its cell and spool and
# starts everything from cold (about 3 s once the packages are installed).
#
# Everything lives OUTSIDE the checkout and outside the package's own cell, in
# ${HYBRID_CI_STATE:-/var/tmp/hybrid-ci}/sge/: its own SGE_ROOT (links to the package's
# binaries) with its own cell "hybridci", spool directories, pid files, env.sh. The Debian
# package's "default" cell and its init scripts are never used.
#
# Tunables (environment):
#   HYBRID_CI_STATE              base state dir                  (/var/tmp/hybrid-ci)
#   HYBRID_CI_SGE_SLOTS          slots of the queue on this host (16)
#   HYBRID_CI_SGE_TIMEOUT        seconds to wait per step        (60)
#   HYBRID_CI_SGE_QMASTER_PORT   sge_qmaster's port              (6444)
#   HYBRID_CI_SGE_EXECD_PORT     sge_execd's port                (6445)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SCRIPT=up
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$HERE/common.sh"

SLOTS="${HYBRID_CI_SGE_SLOTS:-16}"
TIMEOUT="${HYBRID_CI_SGE_TIMEOUT:-60}"
HOST="$(hostname -s)"

T0=$(date +%s.%N)
LAST=$T0
declare -a TIMINGS=()
mark() {  # mark <label>: record the time since the previous mark
    local t; t=$(date +%s.%N)
    TIMINGS+=("$(awk -v a="$LAST" -v b="$t" -v l="$1" 'BEGIN{printf "%-24s %6.2f s", l, b-a}')")
    LAST=$t
}
print_timings() {
    echo "== timings =="
    local l; for l in "${TIMINGS[@]}"; do echo "  $l"; done
    awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "  %-24s %6.2f s\n", "total", b-a}'
}
fail() {  # fail <message> [logfile...]
    local msg=$1 f; shift
    echo "[sge-up] ERROR: $msg" >&2
    for f in "$@"; do
        if [[ -f $f ]]; then
            echo "---- last 30 lines of $f ----" >&2
            tail -n 30 "$f" >&2 || true
        fi
    done
    exit 1
}
# wait_for <seconds> <command...>: poll every 0.1 s until the command succeeds
wait_for() {
    local limit=$1; shift
    local deadline; deadline=$(( $(date +%s) + limit ))
    until "$@" >/dev/null 2>&1; do
        (( $(date +%s) < deadline )) || return 1
        sleep 0.1
    done
}

[[ $(id -u) -eq 0 ]] || fail "must run as root (it installs packages and starts daemons)"

# ---------------------------------------------------------------- install
if [[ ! -x $UTILBIN/sge_qmaster || ! -x $UTILBIN/sge_execd || ! -x $UTILBIN/qsub ]]; then
    log "installing gridengine-master gridengine-exec gridengine-client (log: $LOG/apt.log)"
    mkdir -p "$LOG"
    export DEBIAN_FRONTEND=noninteractive
    # the package's own cell is not used: do not let its postinst create one
    echo "gridengine-common shared/gridengineconfig boolean false" | debconf-set-selections
    packages=(gridengine-master gridengine-exec gridengine-client)
    if ! apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
            "${packages[@]}" >"$LOG/apt.log" 2>&1; then
        # package lists may be missing on a fresh machine
        apt-get -o DPkg::Lock::Timeout=600 update >>"$LOG/apt.log" 2>&1 || true
        apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
            "${packages[@]}" >>"$LOG/apt.log" 2>&1 \
            || fail "apt-get install ${packages[*]} failed" "$LOG/apt.log"
    fi
fi
# Grid Engine has no setting for the address it listens on: its daemons run with a bind()
# shim (loopback_bind.c) that puts their listening sockets on 127.0.0.1, as every server of
# the suite is. Built here (a C compiler is installed if there is none).
SHIM="$STATE/loopback_bind.so"
if [[ ! -f $SHIM || $HERE/loopback_bind.c -nt $SHIM ]]; then
    mkdir -p "$STATE" "$LOG"
    if ! command -v cc >/dev/null; then
        log "installing gcc for the bind shim (log: $LOG/apt-gcc.log)"
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
            --no-install-recommends gcc libc6-dev >"$LOG/apt-gcc.log" 2>&1 \
            || fail "apt-get install gcc libc6-dev failed" "$LOG/apt-gcc.log"
    fi
    cc -shared -fPIC -O2 -Wall -o "$SHIM.tmp" "$HERE/loopback_bind.c" -ldl \
        || fail "building the bind shim failed"
    mv -f "$SHIM.tmp" "$SHIM"
fi
id "$ADMIN_USER" >/dev/null 2>&1 || fail "user $ADMIN_USER is missing (the gridengine-common \
package creates it): reinstall gridengine-common"
mark install

# ---------------------------------------------------------------- host names
# Grid Engine refuses a connection when the peer's address does not resolve back to the name
# the peer claims ("client IP resolved to host name localhost. This is not identical to
# clients host name vm"): with "127.0.0.1 localhost" first in /etc/hosts, every address of
# this host resolves to another name than $(hostname). host_aliases makes every name Grid
# Engine finds for this host's addresses an alias of $HOST; /etc/hosts is left alone.
ALIASES=()
ADDRESSES=$(SGE_ROOT=/var/lib/gridengine "$UTILBIN/gethostbyname" -all "$HOST" 2>/dev/null \
            | sed -n 's/^Host Address(es): //p')
[[ -n $ADDRESSES ]] || fail "this host's name '$HOST' does not resolve to an address: add it \
to /etc/hosts (e.g. '127.0.0.1 $HOST') or DNS"
for address in $ADDRESSES; do
    name=$(SGE_ROOT=/var/lib/gridengine "$UTILBIN/gethostbyaddr" -name "$address" 2>/dev/null \
           || true)
    if [[ -n $name && $name != "$HOST" && " ${ALIASES[*]} " != *" $name "* ]]; then
        ALIASES+=("$name")
    fi
done
full=$(hostname -f 2>/dev/null || true)
if [[ -n $full && $full != "$HOST" && " ${ALIASES[*]} " != *" $full "* ]]; then
    ALIASES+=("$full")
fi
HOST_ALIASES="$HOST${ALIASES[*]:+ ${ALIASES[*]}}"

# ---------------------------------------------------------------- configuration
# The bootstrap file: classic (flat-file) spooling in our state dir; the daemons run as
# $ADMIN_USER after they start as root.
BOOTSTRAP=$(cat <<EOF
# Version: 8.1.9
# Written by hybrid ci/sge/up.sh -- single-node CI cell. Do not edit.
admin_user              $ADMIN_USER
default_domain          none
ignore_fqdn             true
spooling_method         classic
spooling_lib            libspoolc
spooling_params         $COMMON;$SPOOL/qmaster
binary_path             /usr/sbin
qmaster_spool_dir       $SPOOL/qmaster
security_mode           none
listener_threads        2
worker_threads          2
scheduler_threads       1
jvm_threads             0
EOF
)

# The global configuration: the package's defaults but for
# - min_uid/min_gid 0: CI submits as root, and Grid Engine refuses jobs of uids under
#   min_uid (the default 1000 rejects root's jobs),
# - execd_spool_dir in our state dir, mailer /bin/true (no mail),
# - accounting flushed every second (qacct sees a finished job at once),
# - ENABLE_ADDGRP_KILL: qdel kills every process of a job by its additional group id.
GLOBAL_CONF=$(cat <<EOF
conf_version           0
execd_spool_dir        $SPOOL/execd
mailer                 /bin/true
xterm                  /usr/bin/xterm
load_sensor            none
prolog                 none
epilog                 none
shell_start_mode       posix_compliant
login_shells           bash,sh,ksh,csh,tcsh
min_uid                0
min_gid                0
user_lists             none
xuser_lists            none
projects               none
xprojects              none
enforce_project        false
enforce_user           auto
load_report_time       00:00:20
max_unheard            00:05:00
reschedule_unknown     00:00:00
loglevel               log_warning
administrator_mail     none
set_token_cmd          none
pag_cmd                none
token_extend_time      none
shepherd_cmd           none
qmaster_params         none
execd_params           ENABLE_ADDGRP_KILL=true
reporting_params       accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00
finished_jobs          100
gid_range              65400-65500
qlogin_command         builtin
qlogin_daemon          builtin
rlogin_command         builtin
rlogin_daemon          builtin
rsh_command            builtin
rsh_daemon             builtin
max_aj_instances       2000
max_aj_tasks           75000
max_u_jobs             0
max_jobs               0
auto_user_oticket      0
auto_user_fshare       0
auto_user_default_project none
auto_user_delete_time  86400
delegated_file_staging false
reprioritize           0
jsv_url                none
jsv_allowed_mod        ac,h,i,e,o,j,M,N,p,w
EOF
)

# The scheduler: a pass every second (the default 15 s would make every job wait), no load
# adjustments (a dispatched job would otherwise count as load for 7.5 minutes).
SCHED_CONF=$(cat <<EOF
algorithm                         default
schedule_interval                 0:0:1
maxujobs                          0
queue_sort_method                 load
job_load_adjustments              NONE
load_adjustment_decay_time        0:0:0
load_formula                      np_load_avg
schedd_job_info                   true
flush_submit_sec                  1
flush_finish_sec                  1
params                            none
reprioritize_interval             0:0:0
halftime                          168
usage_weight_list                 cpu=1.000000,mem=0.000000,io=0.000000
compensation_factor               5.000000
weight_user                       0.250000
weight_project                    0.250000
weight_department                 0.250000
weight_job                        0.250000
weight_tickets_functional         0
weight_tickets_share              0
share_override_tickets            TRUE
share_functional_shares           TRUE
max_functional_jobs_to_schedule   200
report_pjob_tickets               TRUE
max_pending_tasks_per_job         50
halflife_decay_list               none
policy_hierarchy                  OFS
weight_ticket                     0.500000
weight_waiting_time               0.278000
weight_deadline                   3600000.000000
weight_urgency                    0.500000
weight_priority                   0.000000
max_reservation                   0
default_duration                  INFINITY
EOF
)

# The parallel environment hybrid's multi-core jobs ask for (-pe smp N): all slots on one host.
PE_CONF=$(cat <<EOF
pe_name            $PE
slots              9999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    \$pe_slots
control_slaves     FALSE
job_is_first_task  TRUE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
EOF
)

# A consumable "gpu" complex (INT, per host) and four fake GPUs on this host, as the CI
# Slurm declares, so GPU pools (-l gpu=N) run here.
GPU_COMPLEX=$(cat <<EOF
name        gpu
shortcut    gpu
type        INT
relop       <=
requestable YES
consumable  YES
default     0
urgency     0
EOF
)

EXEC_HOST=$(cat <<EOF
hostname              $HOST
load_scaling          NONE
complex_values        gpu=4
user_lists            NONE
xuser_lists           NONE
projects              NONE
xprojects             NONE
usage_scaling         NONE
report_variables      NONE
EOF
)

PROJECT_CONF=$(cat <<EOF
name    $PROJECT
oticket 0
fshare  0
acl     NONE
xacl    NONE
EOF
)

# The queue: no load thresholds (a busy 2-core machine would otherwise put it in alarm state
# and dispatch nothing), bash as the shell, the PE, $SLOTS slots.
QUEUE_CONF=$(cat <<EOF
qname                 $QUEUE
hostlist              $HOST
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               $PE
rerun                 FALSE
slots                 $SLOTS
tmpdir                /tmp
shell                 /bin/bash
prolog                NONE
epilog                NONE
shell_start_mode      posix_compliant
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:60
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
s_rt                  INFINITY
h_rt                  INFINITY
s_cpu                 INFINITY
h_cpu                 INFINITY
s_fsize               INFINITY
h_fsize               INFINITY
s_data                INFINITY
h_data                INFINITY
s_stack               INFINITY
h_stack               INFINITY
s_core                INFINITY
h_core                INFINITY
s_rss                 INFINITY
h_rss                 INFINITY
s_vmem                INFINITY
h_vmem                INFINITY
EOF
)

FINGERPRINT=$(printf '%s\n' "$HOST_ALIASES" "$QMASTER_PORT" "$EXECD_PORT" "$BOOTSTRAP" \
    "$GLOBAL_CONF" "$SCHED_CONF" "$PE_CONF" "$GPU_COMPLEX" "$EXEC_HOST" "$PROJECT_CONF" \
    "$QUEUE_CONF" "$(sha256sum <"$SHIM")" | sha256sum | cut -d' ' -f1)

write_env() {
    cat >"$STATE/env.sh" <<EOF
# Source this before using the CI Grid Engine (written by ci/sge/up.sh).
export SGE_ROOT=$SGE_ROOT_DIR
export SGE_CELL=$CELL
export SGE_QMASTER_PORT=$QMASTER_PORT
export SGE_EXECD_PORT=$EXECD_PORT
export HYBRID_CI_SGE_STATE=$STATE
export HYBRID_CI_SGE_QUEUE=$QUEUE
export HYBRID_CI_SGE_PE=$PE
export HYBRID_CI_SGE_PROJECT=$PROJECT
EOF
    chmod 0644 "$STATE/env.sh"
}

sge_env
# queue_ok: the queue instance on this host is listed with no state letter (no "u"nknown,
# "a"larm, "E"rror, "d"isabled...): the execd reported in and jobs can be dispatched there.
queue_ok() {
    local out
    out=$(timeout 10 qstat -f -xml -q "$QUEUE@$HOST" 2>/dev/null) || return 1
    grep -q "<name>$QUEUE@$HOST</name>" <<<"$out" && ! grep -q '<state>' <<<"$out"
}
qmaster_answers() { timeout 10 qconf -sh >/dev/null 2>&1; }

# ---------------------------------------------------------------- warm?
# Daemons alive with this configuration: up. Their answers may be slow on a loaded machine
# (every test session runs this script, and other tests' jobs run meanwhile): they get 30 s
# before the cell counts as broken, as a cold start would kill those jobs.
answers() { qmaster_answers && queue_ok; }
if qpid=$(recorded_pid "$RUN/qmaster.pid" sge_qmaster) \
   && epid=$(recorded_pid "$RUN/execd.pid" sge_execd) \
   && [[ "$(cat "$RUN/config.sha" 2>/dev/null)" == "$FINGERPRINT" ]] \
   && wait_for 30 answers; then
    mark "warm check"
    write_env
    log "already up: sge_qmaster $qpid, sge_execd $epid; queue $QUEUE@$HOST ready"
    log "env: source $STATE/env.sh"
    print_timings
    exit 0
fi

# ---------------------------------------------------------------- cold start
log "cold start (state in $STATE)"
"$HERE/down.sh" >/dev/null 2>&1 || true
mark "stop leftovers"

# Ports must be free: a Grid Engine we did not start would be a conflict.
if command -v ss >/dev/null; then
    busy=$(ss -Htlnp 2>/dev/null | awk -v a=":$QMASTER_PORT\$" -v b=":$EXECD_PORT\$" \
           '$4 ~ a || $4 ~ b' || true)
    [[ -z $busy ]] || fail "ports $QMASTER_PORT/$EXECD_PORT are in use by processes this \
script did not record:
$busy"
fi

rm -rf "$SGE_ROOT_DIR" "$SPOOL" "$RUN"
mkdir -p "$STATE" "$COMMON" "$SPOOL/qmaster" "$SPOOL/execd" "$RUN" "$LOG"
chmod 0755 "$STATE"
for d in bin lib utilbin util; do
    ln -s "/var/lib/gridengine/$d" "$SGE_ROOT_DIR/$d"
done
printf '%s\n' "$BOOTSTRAP" >"$COMMON/bootstrap"
printf '%s\n' "$HOST_ALIASES" >"$COMMON/host_aliases"
printf '%s\n' "$HOST" >"$COMMON/act_qmaster"
TEMPLATES="$STATE/templates"
rm -rf "$TEMPLATES"
mkdir -p "$TEMPLATES"/{centry,adminhosts,submithosts}
cp /usr/share/gridengine/util/resources/centry/* "$TEMPLATES/centry/"
printf '%s\n' "$GPU_COMPLEX" >"$TEMPLATES/centry/gpu"
printf 'hostname %s\n' "$HOST" >"$TEMPLATES/adminhosts/$HOST"
printf 'hostname %s\n' "$HOST" >"$TEMPLATES/submithosts/$HOST"
printf '%s\n' "$GLOBAL_CONF" >"$TEMPLATES/global"
printf '%s\n' "$SCHED_CONF" >"$TEMPLATES/sched"
printf '%s\n' "$PE_CONF" >"$TEMPLATES/pe"
printf '%s\n' "$EXEC_HOST" >"$TEMPLATES/exechost"
printf '%s\n' "$PROJECT_CONF" >"$TEMPLATES/project"
printf '%s\n' "$QUEUE_CONF" >"$TEMPLATES/queue"

# What Grid Engine now calls this host, through its own resolver and host_aliases: one name.
seen="$("$UTILBIN/gethostname" -aname)"
for address in $ADDRESSES; do
    seen+=" $("$UTILBIN/gethostbyaddr" -aname "$address")"
done
[[ "$(tr ' ' '\n' <<<"$seen" | sort -u)" == "$HOST" ]] \
    || fail "Grid Engine resolves this host to '$seen', not '$HOST' alone (host_aliases: \
$HOST_ALIASES)"

# A fresh spool with the defaults, written before the master starts (no qconf needed).
(
    cd "$STATE"
    "$UTILBIN/spoolinit" classic libspoolc "$COMMON;$SPOOL/qmaster" init
    "$UTILBIN/spooldefaults" configuration "$TEMPLATES/global"
    "$UTILBIN/spooldefaults" complexes "$TEMPLATES/centry"
    "$UTILBIN/spooldefaults" usersets /usr/share/gridengine/util/resources/usersets
    "$UTILBIN/spooldefaults" managers "$ADMIN_USER" root
    "$UTILBIN/spooldefaults" adminhosts "$TEMPLATES/adminhosts"
    "$UTILBIN/spooldefaults" submithosts "$TEMPLATES/submithosts"
) >"$LOG/spoolinit.log" 2>&1 || fail "initialising the spool failed" "$LOG/spoolinit.log"
chown -R "$ADMIN_USER:$ADMIN_USER" "$SGE_ROOT_DIR/$CELL" "$SPOOL" "$RUN"
mark config

# ---------------------------------------------------------------- sge_qmaster
# It daemonizes; SGE_QMASTER_PIDFILE says where it records its pid.
(cd / && SGE_QMASTER_PIDFILE="$RUN/qmaster.pid" LD_PRELOAD="$SHIM" "$UTILBIN/sge_qmaster") \
    || fail "sge_qmaster did not start" "$SPOOL/qmaster/messages"
wait_for "$TIMEOUT" recorded_pid "$RUN/qmaster.pid" sge_qmaster \
    || fail "sge_qmaster is not running (pid file $RUN/qmaster.pid)" "$SPOOL/qmaster/messages"
wait_for "$TIMEOUT" qmaster_answers \
    || fail "sge_qmaster does not answer qconf within ${TIMEOUT}s" "$SPOOL/qmaster/messages"
mark sge_qmaster

(
    cd /tmp
    qconf -Msconf "$TEMPLATES/sched"
    qconf -Ap "$TEMPLATES/pe"
    qconf -Ae "$TEMPLATES/exechost"
    qconf -Aprj "$TEMPLATES/project"
    qconf -Aq "$TEMPLATES/queue"
) >"$LOG/qconf.log" 2>&1 || fail "configuring the cell with qconf failed" "$LOG/qconf.log" \
    "$SPOOL/qmaster/messages"
mark "queue, PE, host"

# ---------------------------------------------------------------- sge_execd
(cd / && LD_PRELOAD="$SHIM" "$UTILBIN/sge_execd") || fail "sge_execd did not start"
wait_for "$TIMEOUT" execd_pidfile || fail "sge_execd wrote no pid file under $SPOOL/execd"
ln -sf "$(execd_pidfile)" "$RUN/execd.pid"
wait_for "$TIMEOUT" recorded_pid "$RUN/execd.pid" sge_execd \
    || fail "sge_execd is not running" "$(dirname "$(execd_pidfile)")/messages"
wait_for "$TIMEOUT" queue_ok || {
    qstat -f >&2 || true
    fail "queue $QUEUE@$HOST not ready within ${TIMEOUT}s" \
        "$(dirname "$(execd_pidfile)")/messages" "$SPOOL/qmaster/messages"
}
mark "sge_execd + queue ready"

printf '%s\n' "$FINGERPRINT" >"$RUN/config.sha"
write_env

# ---------------------------------------------------------------- smoke
out=$(cd /tmp && timeout "$TIMEOUT" qsub -sync y -b y -N hybrid-ci-smoke -o /dev/null -j y \
      -pe "$PE" 2 -P "$PROJECT" /bin/true 2>&1) \
    || fail "smoke test 'qsub -sync y /bin/true' failed: $out" "$SPOOL/qmaster/messages"
mark "smoke qsub -sync y"
log "smoke: $(tail -n1 <<<"$out")"

log "up: sge_qmaster $(recorded_pid "$RUN/qmaster.pid" sge_qmaster), sge_execd $(recorded_pid \
"$RUN/execd.pid" sge_execd); queue $QUEUE@$HOST ($SLOTS slots, PE $PE, 4 fake GPUs)"
log "env: source $STATE/env.sh"
print_timings
