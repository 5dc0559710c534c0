# On a GPU node: the performance benchmarks on job folders compiled on a CPU machine (torch-mlir is not on
# the node); results under $OUT. Carry .gpu-bundle/site.tar.xz, .whl and the job folders.
#   bash benchmarks/gpu_node/perf.sh targets DIR          # benchmarks/perf_targets.py measure DIR
#   bash benchmarks/gpu_node/perf.sh sweep DIR            # benchmarks/schedule_sweep.py measure DIR
#   bash benchmarks/gpu_node/perf.sh loop DIR MODEL.py... # orchestrator submit: the whole loop, ITER (6)
#                                                         # iterations; DIR/<model>/ holds each lowering
# Several steps share one call (one node start, one environment): `perf.sh sweep A targets B`; a loop
# step comes last. All of them stop in time for the device tool's 600 s (BUDGET_S, 570). PROFILE=1: the
# targets step also runs Nsight Compute (its metrics in the records).
usage="usage: perf.sh targets|sweep DIR [targets|sweep DIR ...] [loop DIR MODEL.py...]"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
set -e
source benchmarks/gpu_node/env.sh
set +e
# the measure records (timings, NCU metrics) come back beside the tables, without the compiled artifacts
records() { tar czf "$OUT/records-$(basename "$1").tgz" --exclude='*.mlir' --exclude='*.ptx' --exclude='*.pt' "$1"; }
while [ $# -ge 2 ]; do
    step=$1 dir=$2
    shift 2
    limit=$(( ${BUDGET_S:-570} - SECONDS ))  # what is left of the budget, for this step and the rest
    case $step in
        targets) timeout $limit python3 benchmarks/perf_targets.py measure "$dir" --timeout 60 ${PROFILE:+--profile} \
                     --record "$OUT/perf_targets.md"
                 records "$dir" ;;
        sweep) timeout $limit python3 benchmarks/schedule_sweep.py measure "$dir" --timeout 60 --record "$OUT/sweep.md"
               records "$dir" ;;
        loop) timeout $limit python3 -m orchestrator.cli submit "$@" --out "$dir" --iterations "${ITER:-6}" --compile-workers 6
              tar czf "$OUT/loop.tgz" --exclude=model_linalg.mlir "$dir"
              break ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
