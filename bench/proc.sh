# Readings of /proc/PID/stat (every thread of the process), and the wait
# for a server just started, sourced by bench/run.sh and bench/ab.sh.

# wait_http PID URL [curl options]: until URL answers (any HTTP status), at
# most 60 s; fails when PID exits first.
wait_http() {
    local pid="$1" url="$2" i code
    shift 2
    for ((i = 0; i < 600; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$@" "$url" || true)"
        [[ "$code" != 000 && -n "$code" ]] && return 0
        sleep 0.1
    done
    return 1
}

# User and kernel CPU of PID so far, in clock ticks, from one reading:
# "UTIME STIME" ("0 0" once the process is gone).
cpu_ticks() {
    local stat fields
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo "0 0"; return; }
    # The fields after the command's name, which may hold spaces: state first.
    read -ra fields <<<"${stat##*) }"
    echo "${fields[11]} ${fields[12]}"
}

# Minor and major page faults of PID so far: "MINOR MAJOR".
faults() {
    local stat fields
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo "0 0"; return; }
    read -ra fields <<<"${stat##*) }"
    echo "${fields[7]} ${fields[9]}"
}
