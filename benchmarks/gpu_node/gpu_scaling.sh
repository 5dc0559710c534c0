# On a GPU node without package access: measured iterations per minute with 1 and then 2 GPU measure
# workers on the same batch (benchmarks/gpu_scaling.py), and the check that no two measurements shared a
# GPU. SAME_GPU=1 (default) pins both workers to GPU 0: on a single-GPU node that runs the pinning and
# the per-GPU lock; SAME_GPU=0 on a multi-GPU node runs one worker per GPU (WORKERS=N, default all GPUs).
# ITER (default 2) and MODELS (zoo names, default the six of benchmarks/gpu_scaling.py) size the batch.
# Needs .gpu-bundle/site.tar.xz (deploy/gpu_site_bundle.sh), .whl/ (pycuda-site.tgz, or the pycuda sdist
# and wheels: deploy/gpu_node_setup.sh) and .gpu-bundle/lowered (on a CPU machine:
# `.venv/bin/python benchmarks/gpu_scaling.py --lower-to .gpu-bundle/lowered`; torch-mlir is not on the node).
set -e
source benchmarks/gpu_node/env.sh
nvidia-smi -L
echo "UUID the measure workers lock (CUDA_VISIBLE_DEVICES=0): $(CUDA_VISIBLE_DEVICES=0 python3 -m orchestrator.gpus)"
set +e
# whatever the setup took, stop the benchmark in time to pack its results inside the device tool's 600 s
timeout $(( ${BUDGET_S:-580} - SECONDS )) python3 benchmarks/gpu_scaling.py --lowered .gpu-bundle/lowered --iterations "${ITER:-2}" \
    $([ "${SAME_GPU:-1}" = 1 ] && echo --same-gpu) ${WORKERS:+--workers $WORKERS} ${MODELS:+--models $MODELS} \
    --work /tmp/gpu-scaling --results "$OUT/gpu_scaling.md"
rc=$?
# job reports and worker logs (lock waits are logged there); not the copied lowerings
tar czf "$OUT/gpu-scaling-runs.tgz" --exclude='model_linalg.mlir' -C /tmp gpu-scaling 2>/dev/null
exit $rc
