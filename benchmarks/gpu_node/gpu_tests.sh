# On a GPU node: tests/test_measure_gpu.py (the measure worker's failure classes, every breadth model's v0
# correct on 3 input draws, the wgmma kernels), with torch.compile of the breadth models done first in
# parallel processes (Inductor's cache then serves the tests' sequential timing). Carry .gpu-bundle and .whl.
#   bash benchmarks/gpu_node/gpu_tests.sh [pytest options]     -> $OUT/gpu_tests.log
#   BREADTH="topk short_rows" bash benchmarks/gpu_node/gpu_tests.sh -k "topk or short_rows"   (warm those alone)
source benchmarks/gpu_node/env.sh
warm=$(mktemp -d)
for data in tests/data/measure/breadth/*/; do
    name=$(basename "$data")
    [ -z "${BREADTH:-}" ] || [[ " $BREADTH " == *" $name "* ]] || continue
    mkdir -p "$warm/$name/v0" && cp "$data"* "$warm/$name/v0/" && cp "tests/data/breadth/$name.py" "$warm/$name/model.py"
done
ls "$warm" | xargs -P "$(nproc)" -I{} python3 -m workers.measure.warm_peer "$warm/{}" > "$OUT/warm.log" 2>&1
echo "peers warmed in ${SECONDS}s"
python3 -m pytest -q -p no:cacheprovider tests/test_measure_gpu.py "$@" 2>&1 | tee "$OUT/gpu_tests.log"
