#!/bin/sh
# tests/slurm/local-cluster.sh start|stop|status
#
# A single-node Slurm on this machine, for tests: munged, slurmctld and slurmd
# with a minimal slurm.conf for this host (its CPUs from `slurmd -C`), all state,
# logs and PID files under one scratch directory. Installs nothing: it needs the
# Debian packages slurmctld, slurmd, slurm-client and munge, and root (munged runs
# as the munge user, slurmd launches jobs). Daemons run without systemd.
#
#   start   writes the configuration, starts munged (unless one already answers),
#           slurmctld and slurmd, and waits until the node is idle; exit 1 with
#           the reason and the log tails when it cannot.
#   stop    cancels the cluster's jobs and stops every daemon this script started
#           (by the PIDs it recorded), nothing else.
#   status  prints the daemons and the node state; exit 0 when the node is up.
#
# Environment:
#   QLAB_SLURM_DIR   scratch directory (default ${TMPDIR:-/tmp}/qlab-slurm)
#   QLAB_SLURM_PORT  slurmctld port (default 6817); slurmd uses the next one
#
# Clients find the cluster through SLURM_CONF:
#   export SLURM_CONF="$QLAB_SLURM_DIR/slurm.conf"   (printed by start)
set -u

dir="${QLAB_SLURM_DIR:-${TMPDIR:-/tmp}/qlab-slurm}"
port="${QLAB_SLURM_PORT:-6817}"
conf="$dir/slurm.conf"
started="$dir/started" # "name pid" of every daemon this script started
host=$(hostname -s)
export SLURM_CONF="$conf"

say() { echo "local-cluster: $*"; }
die() {
    say "$*" >&2
    exit 1
}

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# pid_of NAME: the recorded PID of a daemon this script started.
pid_of() { [ -f "$started" ] && awk -v n="$1" '$1 == n { print $2 }' "$started" | tail -n 1; }

node_state() { sinfo -h -n "$host" -o %t 2>/dev/null | head -n 1; }

show_logs() {
    for f in "$dir/slurmctld.log" "$dir/slurmd.log" /var/log/munge/munged.log; do
        [ -s "$f" ] || continue
        echo "--- last lines of $f" >&2
        tail -n 15 "$f" >&2
    done
}

# wait_for SECONDS CMD...: polls CMD four times a second until it succeeds.
wait_for() {
    limit=$(($1 * 4))
    shift
    i=0
    while [ "$i" -lt "$limit" ]; do
        "$@" && return 0
        sleep 0.25
        i=$((i + 1))
    done
    return 1
}

# A start that fails half-way stops what it started and says why.
fail_start() {
    show_logs
    stop >/dev/null 2>&1
    die "$*"
}

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
node_idle() { [ "$(node_state)" = idle ]; }
queue_empty() { [ -z "$(squeue -h -o %i 2>/dev/null)" ]; }

write_conf() {
    # `slurmd -C` prints this machine's NodeName line (CPUs, sockets, cores,
    # threads, memory) and an UpTime line.
    node=$(slurmd -C 2>/dev/null | grep '^NodeName=') || die "slurmd -C printed no NodeName line"
    # Addresses given explicitly, so the test does not depend on the host name
    # resolving.
    cat >"$conf" <<END
# Written by tests/slurm/local-cluster.sh: a single-node cluster for tests.
ClusterName=qlab-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
# No cgroups here: track processes by parentage, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=30
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=qlab Nodes=$host Default=YES MaxTime=INFINITE State=UP
END
}

start() {
    for b in munge unmunge munged slurmctld slurmd sbatch squeue sinfo scontrol scancel; do
        command -v "$b" >/dev/null 2>&1 || die "'$b' is not installed (Debian: slurmctld slurmd slurm-client munge)"
    done
    [ "$(id -u)" -eq 0 ] || die "needs root (munged runs as the munge user, slurmd launches jobs); running as uid $(id -u)"
    if alive "$(pid_of slurmctld)" || alive "$(pid_of slurmd)"; then
        die "already running (see '$0 status'); stop it first"
    fi
    # A fresh cluster every time: no jobs or node states from an earlier run.
    rm -rf "$dir/state" "$dir/spool"
    mkdir -p "$dir/state" "$dir/spool" || die "cannot create $dir"
    : >"$started"

    # munge: the package creates /etc/munge/munge.key; make one if it is missing.
    if ! munge_works; then
        if [ ! -s /etc/munge/munge.key ]; then
            say "creating /etc/munge/munge.key"
            mkdir -p /etc/munge
            if command -v mungekey >/dev/null 2>&1; then
                mungekey --create --keyfile=/etc/munge/munge.key || die "mungekey failed"
            else
                dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
            fi
            chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
        fi
        mkdir -p /run/munge /var/lib/munge /var/log/munge
        chown munge:munge /run/munge /var/lib/munge /var/log/munge
        chmod 0755 /run/munge
        # munged refuses a log directory others can write to: its own default one.
        runuser -u munge -- munged >/dev/null 2>&1 || fail_start "munged did not start"
        echo "munged $(cat /run/munge/munged.pid 2>/dev/null)" >>"$started"
        wait_for 10 munge_works || fail_start "munged started but 'munge -n | unmunge' fails"
    fi

    write_conf
    rm -f "$dir/slurmctld.pid" "$dir/slurmd.pid"
    # Without -D both daemonize and write their PID files.
    for d in slurmctld slurmd; do
        "$d" -f "$conf" >"$dir/$d.out" 2>&1 || {
            cat "$dir/$d.out" >&2
            fail_start "$d did not start"
        }
        wait_for 10 test -s "$dir/$d.pid" || fail_start "$d wrote no PID file"
        echo "$d $(cat "$dir/$d.pid")" >>"$started"
        # A daemon that cannot bind its port exits right after writing its PID.
        sleep 0.5
        alive "$(pid_of "$d")" || fail_start "$d exited at once (port $port or $((port + 1)) in use?)"
    done

    if ! wait_for 30 node_idle; then
        # A node remembered as down from an earlier run: return it to service once.
        scontrol update nodename="$host" state=resume >/dev/null 2>&1
        wait_for 15 node_idle || {
            sinfo >&2
            fail_start "node $host did not become idle (state '$(node_state)')"
        }
    fi
    say "node $host is idle ($(sinfo -h -n "$host" -o '%c CPUs'))"
    say "export SLURM_CONF=$conf"
}

# stop_daemons NAME...: stops daemons this script started, by their recorded
# PIDs, all at once (each takes about 2 s to save its state and exit).
stop_daemons() {
    pids=""
    for d in "$@"; do
        pid=$(pid_of "$d")
        alive "$pid" && kill "$pid" 2>/dev/null && pids="$pids $pid"
    done
    [ -n "$pids" ] || return 0
    gone() {
        for p in $pids; do kill -0 "$p" 2>/dev/null && return 1; done
        return 0
    }
    wait_for 20 gone && return 0
    for p in $pids; do
        alive "$p" && say "pid $p ignored SIGTERM; sending SIGKILL" && kill -9 "$p" 2>/dev/null
    done
    return 0
}

stop() {
    [ -f "$started" ] || {
        say "nothing was started here ($started missing)"
        return 0
    }
    if alive "$(pid_of slurmctld)"; then
        # Jobs first, so slurmd reaps their processes before it goes.
        ids=$(squeue -h -o %i 2>/dev/null)
        if [ -n "$ids" ]; then
            # shellcheck disable=SC2086
            scancel $ids 2>/dev/null
            wait_for 15 queue_empty
        fi
    fi
    stop_daemons slurmd slurmctld munged
    rm -f "$started"
    say "stopped"
}

status() {
    up=0
    for d in munged slurmctld slurmd; do
        pid=$(pid_of "$d")
        if alive "$pid"; then
            say "$d running (pid $pid, started here)"
        elif [ -n "$pid" ]; then
            say "$d NOT running (pid $pid was started here)"
            up=1
        fi
    done
    munge_works || {
        say "munge does not answer"
        up=1
    }
    state=$(node_state)
    say "node $host: ${state:-unknown}"
    case "$state" in idle | mix | alloc | comp*) ;; *) up=1 ;; esac
    return "$up"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
