# On a GPU node: the performance benchmarks on job folders compiled on a CPU machine (torch-mlir is not on
# the node); results under $OUT. Carry .gpu-bundle/site.tar.xz, .whl and the job folder.
#   bash benchmarks/gpu_node/perf.sh targets DIR          # benchmarks/perf_targets.py measure DIR
#   bash benchmarks/gpu_node/perf.sh sweep DIR            # benchmarks/schedule_sweep.py measure DIR
#   bash benchmarks/gpu_node/perf.sh loop DIR MODEL.py... # orchestrator submit: the whole loop, ITER (6)
#                                                         # iterations; DIR/<model>/ holds each lowering
set -e
source benchmarks/gpu_node/env.sh
step=$1 dir=$2
shift 2
set +e
limit=$(( ${BUDGET_S:-570} - SECONDS ))  # stop in time to pack the results inside the device tool's 600 s
# the measure records (timings, NCU metrics) come back beside the tables, without the compiled artifacts
records() { tar czf "$OUT/records.tgz" --exclude='*.mlir' --exclude='*.ptx' --exclude='*.pt' "$dir"; }
case $step in
    targets) timeout $limit python3 benchmarks/perf_targets.py measure "$dir" --timeout 60 --record "$OUT/perf_targets.md"
             records ;;
    sweep) timeout $limit python3 benchmarks/schedule_sweep.py measure "$dir" --timeout 60 --record "$OUT/sweep.md"
           records ;;
    loop) timeout $limit python3 -m orchestrator.cli submit "$@" --out "$dir" --iterations "${ITER:-6}" --compile-workers 6
          tar czf "$OUT/loop.tgz" --exclude=model_linalg.mlir "$dir" ;;
    *) echo "usage: perf.sh targets|sweep|loop DIR [MODEL.py...]" >&2; exit 2 ;;
esac
