#!/bin/bash
# The daemons' CPU by stage through a real TUN: `vpncrypt bench tunnel
# --pairings vc-vc` (TCP, or UDP with --udp) with `perf record -g` on both
# vpncrypt daemons while iperf3 runs, then native/bench/stage_profile.py.
#
#   bash native/bench/profile_tunnel.sh OUTDIR [--udp] [--py-spy] [-- extra bench args]
#
# Run as root from the repo, with the module built with frame pointers so that
# the native frames are walked:
#   CFLAGS="-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer" .venv/bin/pip install -e .
# --py-spy samples the Python stacks with `py-spy record --native` instead of
# perf (another run: the two together disturb each other).
set -euo pipefail
out=${1:?OUTDIR}
shift
proto=tcp spy=0
while [ $# -gt 0 ]; do
    case $1 in
        --udp) proto=udp ;;
        --py-spy) spy=1 ;;
        --) shift; break ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out"
py=${PYTHON:-.venv/bin/python}
dur=${DURATION:-16}
if [ $proto = tcp ]; then only=--no-udp; else only=--no-tcp; fi
"$py" -m vpncrypt bench tunnel --pairings vc-vc $only --check-mib 0 --duration "$dur" "$@" \
    >"$out/bench.txt" 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null || true' EXIT
id=
for _ in $(seq 100); do
    id=$(sed -n "s/.*run \([0-9a-f]*\):.*/\1/p" "$out/bench.txt" 2>/dev/null | head -1 || true)
    [ -n "$id" ] && break
    sleep 0.2
done
[ -n "$id" ] || { echo "no run id"; cat "$out/bench.txt"; exit 1; }
# the daemons: the processes in the run's namespaces started as `vpncrypt up vcb?0ID`
pids=
for _ in $(seq 150); do
    pids=
    for side in A B; do
        for p in $(ip netns pids "vcb$side-$id" 2>/dev/null); do
            if tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -q " up vcb[ab]0$id "; then
                pids="$pids${pids:+,}$p"
            fi
        done
    done
    [ "$(echo "$pids" | tr ',' '\n' | grep -c .)" = 2 ] && break
    sleep 0.2
done
# iperf3's client in A
for _ in $(seq 200); do
    for p in $(ip netns pids "vcbA-$id" 2>/dev/null); do
        if tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -q "^iperf3 -c"; then break 2; fi
    done
    sleep 0.1
done
sleep 2
win=$((dur - 5))
echo "daemons $pids, sampling $win s" >"$out/info.txt"
if [ $spy = 0 ]; then
    perf record -g -F 499 -p "$pids" -o "$out/perf.data" -- sleep "$win" 2>"$out/perf-record.txt"
else
    spies=
    for p in ${pids//,/ }; do
        "$(dirname "$py")/py-spy" record --native -r 97 -d "$win" -f raw -o "$out/pyspy-$p.txt" -p "$p" \
            >"$out/pyspy-$p.log" 2>&1 &
        spies="$spies $!"
    done
    wait $spies || true
fi
wait $bench || true
trap - EXIT
cat "$out/bench.txt"
if [ $spy = 0 ]; then
    perf script -i "$out/perf.data" -F tid,period,ip,sym,dso >"$out/perf.script" 2>/dev/null
    "$py" native/bench/stage_profile.py "$out/perf.script" --bench "$out/bench.txt"
fi
