# Sourced by the GPU-node scripts: unpack the carried Python site (.gpu-bundle/site.tar.xz, from
# deploy/gpu_site_bundle.sh) and pycuda (.whl/: deploy/gpu_node_setup.sh), and point the environment at them.
mkdir -p /tmp/farm && tar xJf .gpu-bundle/site.tar.xz -C /tmp/farm
bash deploy/gpu_node_setup.sh .whl /tmp/pycuda-site > /tmp/pycuda-setup.log 2>&1 || { tail -20 /tmp/pycuda-setup.log; exit 1; }
export PYTHONPATH=/tmp/farm/site:/tmp/pycuda-site:$PWD PATH=/tmp/farm/bin:$PATH LD_LIBRARY_PATH=/tmp/farm/lib \
    PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
