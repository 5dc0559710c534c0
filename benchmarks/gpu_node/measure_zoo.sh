# On a GPU node: build pycuda from .whl/ (deploy/gpu_node_setup.sh), then measure v0 of the named zoo models
# in farm-out/ (compiled on a CPU machine) with the measure worker. Usage: measure_zoo.sh MODEL...
set -x
nproc
time bash deploy/gpu_node_setup.sh .whl /tmp/pycuda-site 2>&1 | tail -5
tar czf $OUT/pycuda-site.tgz -C /tmp pycuda-site
export PYTHONPATH=/tmp/pycuda-site:$PWD PYTHONUNBUFFERED=1
python3 - "$@" <<'PY'
import sys, time
from workers.measure import measure_iteration
for m in sys.argv[1:]:
    t = time.time()
    r = measure_iteration(f"farm-out/{m}", 0, timeout_s=240)
    top = max(r.kernels, key=lambda k: k.duration_us) if r.kernels else None
    print(f"RESULT {m} status={r.status} correct={r.correct} err={r.max_abs_err} ours={r.time.median_us if r.time else None} "
          f"eager={r.eager.median_us if r.eager else None} compiled={r.compiled.median_us if r.compiled else None} "
          f"kernels={len(r.kernels)} top_sm={top.sm_throughput_pct if top else None} top_mem={top.memory_throughput_pct if top else None} "
          f"wall={time.time()-t:.0f}s {r.error[:300]}", flush=True)
PY
tar czf $OUT/measured.tgz farm-out
