# One device call that does several things in the tool's 600 s, each step in its own time limit so that a
# late step cannot cost an earlier one its results: GPU tests (correctness only), a schedule sweep, then the
# KernelBench measure of packed problems for the time left. Carry .gpu-bundle, .whl (after the first call,
# with the pycuda-site.tgz it returns under $OUT), .kb-carry (every archive there is unpacked) and, for the
# sweep, its folder (`schedule_sweep.py compile sweep-out NAMES`).
#   STEPS="tests graphs measure" TESTS_K="staged_linear or square_linears" GRAPH_JOBS="s29/level3/39_GRU" \
#     MEASURE="s30base=.kb-carry/ab.txt s29=.kb-carry/problems.txt" TOTAL=560 bash benchmarks/gpu_node/call.sh
# TESTS_S, SWEEP_S, GRAPHS_S: those steps' limits (150, 150, 120 s); TOTAL: when the measure step stops
# (560 s); SWEEP_DIR (sweep-out); PROFILE=1: the sweep's rows with Nsight Compute's stalls; GRAPH_JOBS: job
# folders that the graphs step times launched from the host and as one CUDA graph (launch_modes.py).
# MEASURE: TREE=PROBLEMS_FILE[@SECONDS] pairs, measured in turn (an A/B's two trees in one call), each for at
# most SECONDS: TREE is the folder name that `kernelbench.py pack --out DIR` used (DIR's last part),
# PROBLEMS_FILE lists problem files, one a line.
set -e
source benchmarks/gpu_node/env.sh
[ -f .whl/pycuda-site.tgz ] || tar czf "$OUT/pycuda-site.tgz" -C /tmp pycuda-site
for archive in .kb-carry/*.tar.xz; do [ -e "$archive" ] && tar xJf "$archive"; done
set +e
echo "setup done at ${SECONDS}s"
for step in ${STEPS:-tests measure}; do
  case $step in
    tests)
      timeout "${TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider tests/test_measure_gpu.py -k "${TESTS_K:?}" \
          2>&1 | tail -25 | tee "$OUT/gpu_tests.log" ;;
    sweep)
      timeout "${SWEEP_S:-150}" python3 benchmarks/schedule_sweep.py measure "${SWEEP_DIR:-sweep-out}" \
          ${PROFILE:+--profile} --budget $(( ${SWEEP_S:-150} - 35 )) --record "$OUT/schedule_sweep_h200.md" 2>&1 | tail -30 ;;
    measure)
      for pair in ${MEASURE:?}; do
        tree=${pair%%=*} spec=${pair#*=} limit=$(( ${TOTAL:-560} - SECONDS ))
        [[ $spec == *@* ]] && limit=$(( ${spec#*@} < limit ? ${spec#*@} : limit ))
        [ $limit -gt 60 ] || { echo "no time left to measure $tree"; break; }
        timeout $limit python3 benchmarks/kernelbench.py measure --again --out "$tree" --budget $(( limit - 40 )) \
            --record "$OUT/kernelbench_h200.md" $(cat "${spec%@*}") 2>&1 | tail -40
      done
      for pair in $MEASURE; do find "${pair%%=*}" -name '*.measure.json' -o -name reference_timing.json; done \
          | tar czf "$OUT/rows.tgz" -T - ;;
    graphs)  # host launches against one CUDA graph, on the packed trees' job folders GRAPH_JOBS
      timeout "${GRAPHS_S:-120}" python3 benchmarks/launch_modes.py ${GRAPH_JOBS:?} 2>&1 | tail -20 ;;
    *) echo "unknown step $step (tests, sweep, graphs, measure)" ;;
  esac
  echo "$step done at ${SECONDS}s"
done
