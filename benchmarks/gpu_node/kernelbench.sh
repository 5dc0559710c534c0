# On a GPU node: the KernelBench harness's measure step (benchmarks/kernelbench.py measure) on the problems
# compiled on a CPU machine and packed there (`kernelbench.py pack --out DIR`). Carry .gpu-bundle/site.tar.xz,
# .whl and .kb-carry/ (every archive there is unpacked). The table and the rows come back under $OUT.
#   FARM_COMMIT=<sha> bash benchmarks/gpu_node/kernelbench.sh DIR [kernelbench.py measure options, e.g. --level 1]
# (FARM_COMMIT: the commit the records name; the node's copy of the tree may carry a stale git HEAD.)
# With LOOP_ITERATIONS=N, the optimization loop (kernelbench.py loop) then runs on the same problems, up to N
# versions each, for the time left (LOOP_SHARE percent of the budget, default 50, is kept for it).
[ $# -ge 1 ] || { echo "usage: kernelbench.sh DIR [measure options]" >&2; exit 2; }
set -e
source benchmarks/gpu_node/env.sh
for archive in .kb-carry/*.tar.xz; do tar xJf "$archive"; done
set +e
dir=$1
shift
limit=$(( ${BUDGET_S:-570} - SECONDS ))
[ -z "${LOOP_ITERATIONS:-}" ] || limit=$(( limit * (100 - ${LOOP_SHARE:-50}) / 100 ))
timeout $limit python3 benchmarks/kernelbench.py measure --out "$dir" --budget $(( limit - 90 )) \
    --record "$OUT/kernelbench_h200.md" "$@"
if [ -n "${LOOP_ITERATIONS:-}" ]; then
    loop_args=() skip=0  # the options that choose problems; measure's own are dropped
    for arg in "$@"; do
        if [ $skip = 1 ]; then skip=0; continue; fi
        case "$arg" in --peer-workers|--timeout) skip=1; continue ;; --again) continue ;; esac
        loop_args+=("$arg")
    done
    limit=$(( ${BUDGET_S:-570} - SECONDS ))
    timeout $limit python3 benchmarks/kernelbench.py loop --out "$dir" --budget $(( limit - 30 )) \
        --iterations "$LOOP_ITERATIONS" --record "$OUT/kernelbench_loop_h200.md" "${loop_args[@]}"
fi
# the rows and the cached peer times, for the next call and for benchmarks/results
find "$dir" -name '*.measure.json' -o -name '*.loop.json' -o -name reference_timing.json | tar czf "$OUT/rows.tgz" -T -
