# Sourced by scripts/sim_close_loop.sh and scripts/sim_moving_loop.sh (not run alone): what both
# need on a built tree, and their two steps. Needs $name (the script's name for messages) and
# sets root and py; step() appends to $times.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=$root/.lerobot-venv/bin/python
[ -x "$root/build/tools/pi0-sim" ] ||
    { echo "$name: build first (scripts/build.sh build)" >&2; exit 1; }
[ -x "$py" ] || { echo "$name: no $py (scripts/setup.sh makes it)" >&2; exit 1; }

step() { # NAME COMMAND...: runs it, appends its wall time to $times
    local what=$1 t0=$SECONDS
    shift
    echo "== $what"
    "$@"
    echo "$what $((SECONDS - t0)) s" | tee -a "$times"
}

record() { # DIR ARGS...: records unless an earlier run in this OUT finished it (DIR/.done)
    local dir=$1
    shift
    [ -e "$dir/.done" ] && { echo "== $dir: recorded by an earlier run"; return; }
    rm -rf "$dir"
    "$root/scripts/record_sim.sh" "$dir" "$@"
    touch "$dir/.done"
}
