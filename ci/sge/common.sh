# shellcheck shell=bash disable=SC2034
# Shared settings and helpers for ci/sge/up.sh and down.sh. Sourced, not run.

STATE="${HYBRID_CI_STATE:-/var/tmp/hybrid-ci}/sge"
SGE_ROOT_DIR="$STATE/root"          # our own SGE_ROOT: links to the package's binaries + our cell
CELL=hybridci                        # SGE_CELL: $SGE_ROOT_DIR/$CELL/common is the cell's config
COMMON="$SGE_ROOT_DIR/$CELL/common"
SPOOL="$STATE/spool"                 # qmaster/ and execd/ spool directories (owned by sgeadmin)
RUN="$STATE/run"                     # qmaster.pid, execd.pid (a link), config.sha
LOG="$STATE/log"                     # apt.log, smoke-test output
ADMIN_USER=sgeadmin                  # made by the Debian package; the daemons switch to it
QMASTER_PORT="${HYBRID_CI_SGE_QMASTER_PORT:-6444}"
EXECD_PORT="${HYBRID_CI_SGE_EXECD_PORT:-6445}"
QUEUE=hybrid.q
PE=smp
PROJECT=hybridci
UTILBIN=/usr/lib/gridengine          # gethostname, gethostbyname, gethostbyaddr, spoolinit

log() { echo "[sge-${SCRIPT:-ci}] $*"; }

# The environment every Grid Engine tool needs to find this cell (env.sh exports the same).
sge_env() {
    export SGE_ROOT="$SGE_ROOT_DIR" SGE_CELL="$CELL" \
        SGE_QMASTER_PORT="$QMASTER_PORT" SGE_EXECD_PORT="$EXECD_PORT"
}

# recorded_pid <pidfile> <comm>: print the pid if it is alive and is that program
# (guards against a recycled pid after a reboot or a crash).
recorded_pid() {
    local pidfile=$1 comm=$2 pid
    [[ -s $pidfile ]] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]] || return 1
    echo "$pid"
}

# The execd writes its pid file into its own spool directory, named after the host as the
# execd sees itself: find it wherever that is.
execd_pidfile() {
    local f
    for f in "$SPOOL"/execd/*/execd.pid; do
        [[ -f $f ]] && { echo "$f"; return 0; }
    done
    return 1
}

# children_of <pid>: the pids whose parent is <pid> (the execd's shepherds). Field 4 of
# /proc/PID/stat is the parent, after "PID (COMMAND)" (a command may contain spaces).
children_of() {
    awk -v parent="$1" '{
        line = $0; sub(/^[0-9]+ \(.*\) /, "", line); split(line, f, " ")
        if (f[2] == parent) { split(FILENAME, p, "/"); print p[3] }
    }' /proc/[0-9]*/stat 2>/dev/null || true
}
