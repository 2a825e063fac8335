# Readings of /proc/PID/stat (every thread of the process), sourced by
# bench/run.sh and bench/ab.sh.

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
