# On a GPU node without package access: the whole farm (Redis, 2 compile workers, 1 GPU worker) for
# 3 zoo models. Needs .gpu-bundle/site.tar.xz (deploy/gpu_site_bundle.sh), .whl/pycuda-site.tgz (a pycuda
# built by deploy/gpu_node_setup.sh, tarred from /tmp) and e2e-out/ with the models lowered on a CPU machine.
set -e
source benchmarks/gpu_node/env.sh
redis-server --version
python3 -c "import celery, durable, pycuda; from workers.compile import mlir; print('imports ok')"
set +e
PYTHON=python3 bash deploy/farm_on_one_node.sh --compile-workers 2 --logs /tmp/farm-logs -- \
    tests/data/zoo/matmul_square.py tests/data/zoo/mlp.py tests/data/zoo/softmax.py --out e2e-out --iterations "${ITER:-4}"
rc=$?
tar czf $OUT/e2e-out.tgz e2e-out /tmp/farm-logs 2>/dev/null
exit $rc
