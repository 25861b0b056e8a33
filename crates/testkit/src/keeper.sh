# Keeper of a shared test control plane (see cluster.rs, `TestCluster::shared`).
#
# Usage: sh keeper.sh DIR OWNER_PID OWNER_TICKS IDLE_SECONDS
#
# Stops the control plane in DIR and removes DIR when the owner (the test runner, or the test
# process itself outside nextest) has exited, or when no test process has held a lease on the plane
# (a file `leases/PID` naming a live process) for IDLE_SECONDS. Only the processes recorded in DIR's
# pid files are signalled, and only when their start time still matches the recorded one.
set -u
dir=$1 owner=$2 owner_ticks=$3 idle=$4

# Start time (field 22 of /proc/PID/stat) of a live, non-zombie process; fails otherwise.
ticks_of() {
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    # shellcheck disable=SC2086
    set -- $stat
    [ "$1" != Z ] && [ "$1" != X ] || return 1
    shift 19
    echo "$1"
}

alive() {
    t=$(ticks_of "$1") && [ "$t" = "$2" ]
}

# Whether a live test process holds a lease; dead leases are removed.
leased() {
    busy=1
    for lease in "$dir"/leases/*; do
        [ -e "$lease" ] || continue
        read -r pid ticks <"$lease" || continue
        if alive "$pid" "$ticks"; then
            busy=0
        else
            rm -f "$lease"
        fi
    done
    return $busy
}

# Signal every recorded process of DIR that still runs (and is the same process) with $1.
signal_all() {
    for name in git-daemon kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
        pid_file="$dir/run/$name.pid"
        [ -e "$pid_file" ] || continue
        read -r pid ticks <"$pid_file" || continue
        alive "$pid" "$ticks" && kill "-$1" "$pid" 2>/dev/null && running=1
    done
}

locked=0
last_use=$(date +%s)
while alive "$owner" "$owner_ticks"; do
    if leased; then
        last_use=$(date +%s)
    elif [ $(($(date +%s) - last_use)) -ge "$idle" ]; then
        # Idle: stop unless a test took a lease meanwhile (tests take it under the same lock).
        exec 9>>"$dir/lock"
        flock 9
        if leased; then
            flock -u 9
            exec 9>&-
            last_use=$(date +%s)
        else
            locked=1
            break
        fi
    fi
    sleep 0.5
done

# Tests wait on the lock while the plane stops, then find its directory gone and start anew.
if [ $locked = 0 ]; then
    exec 9>>"$dir/lock"
    flock 9
fi
# A throwaway plane: a second for a clean exit, then SIGKILL.
running=0
signal_all TERM
n=0
while [ $running = 1 ] && [ $n -lt 10 ]; do
    sleep 0.1
    running=0
    signal_all 0
    n=$((n + 1))
done
[ $running = 1 ] && signal_all KILL
rm -rf "$dir"
