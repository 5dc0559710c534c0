"""The GPU node's bundle (deploy/gpu_site_bundle.sh) slims the MLIR bindings to the extension modules
the compile stage loads: one left out fails every compile task on the node, which no CPU test would
otherwise see (the node's loop once failed on the nvgpu dialect's)."""
from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "deploy" / "gpu_site_bundle.sh"


def test_the_gpu_bundle_keeps_every_mlir_extension_module_a_compile_task_imports():
    kept = re.findall(r"! -name '([^']+)'", SCRIPT.read_text())
    assert kept, "the bundle script names the extension modules it keeps"
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, workers.compile.driver; print('\\n'.join(m.rsplit('.', 1)[1] "
         "for m in sys.modules if m.startswith('numba_cuda_mlir._mlir._mlir_libs._') and m.count('.') == 3))"],
        capture_output=True, text=True, check=True).stdout.split()
    assert "_mlirDialectsNVGPU" in loaded
    assert [m for m in loaded if not any(fnmatch.fnmatch(m + ".cpython-312-x86_64-linux-gnu.so", p) for p in kept)] == []
