"""Quick GPU check of compiled job folders: correctness against PyTorch and kernel time vs eager.

A developer's smoke test that needs only what the GPU node ships (torch, cupy): each version
folder's kernels.ptx is loaded with cupy and launched as config.json says. The product's measure
worker (workers/measure, pycuda + Nsight Compute) is the full protocol; this is the fast look.
Each job runs in its own process, so an illegal address in one does not poison the next.

    python3 benchmarks/gpu_smoke.py OUT_DIR [--only NAME ...]
"""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUNS = 20


def check_job(job: str) -> None:
    import cupy as cp
    import numpy as np
    import torch

    from workers.model_loader import load_model

    torch_dtypes = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64, "i32": torch.int32,
                    "f16": torch.float16, "bf16": torch.bfloat16, "i1": torch.bool}
    scalar_types = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32}

    def elapsed_us(fn) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(3):
            fn()
        start.record()
        for _ in range(RUNS):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / RUNS * 1000

    for vdir in sorted(glob.glob(os.path.join(job, "v*/"))):
        try:
            cfg = json.load(open(os.path.join(vdir, "config.json")))
            model, inputs = load_model(os.path.join(job, cfg["model_path"]), cfg["seed"])
            model, inputs = model.cuda(), [x.cuda() for x in inputs]
            state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
            buffers = {}
            for b in cfg["buffers"]:
                kind, _, key = b["source"].partition(":")
                dtype = torch_dtypes[b["dtype"]]
                if kind == "input":
                    t = inputs[int(key)]
                elif kind == "weight":
                    t = state[key].detach()
                elif b["role"] == "constant":
                    t = torch.tensor(b["values"], dtype=dtype).reshape(b["shape"]).cuda()
                else:
                    t = torch.full(b["shape"], float("nan") if dtype.is_floating_point else 0, dtype=dtype, device="cuda")
                buffers[b["name"]] = t.contiguous()
            module = cp.RawModule(path=os.path.join(vdir, "kernels.ptx"))
            launches = [(module.get_function(l["kernel"]), tuple(l["grid"]), tuple(l["block"]), l["shared_bytes"],
                         tuple(cp.asarray(buffers[a["buffer"]]) if a["kind"] == "buffer"
                               else scalar_types[a["dtype"]](a["value"]) for a in l["args"]))
                        for l in cfg["launches"]]

            def run():
                for fn, grid, block, shared, args in launches:
                    fn(grid, block, args, shared_mem=shared)

            run()
            torch.cuda.synchronize()
            with torch.no_grad():
                ref = model(*inputs)
                eager = elapsed_us(lambda: model(*inputs))
            ref = ref if isinstance(ref, (tuple, list)) else [ref]
            ok, worst = True, 0.0
            for out, r in zip(cfg["outputs"], ref):
                got = buffers[out["buffer"]].reshape(out["shape"]).float()
                worst = max(worst, (got - r.float()).abs().max().item())
                ok &= torch.allclose(got, r.float(), atol=cfg["atol"], rtol=cfg["rtol"])
            ours = elapsed_us(run)
            print(f"{vdir:40} {'PASS' if ok else 'FAIL'} max_abs_err={worst:.1e} kernels={len(launches):2d} "
                  f"ours={ours:9.1f}us eager={eager:8.1f}us eager/ours={eager / ours:6.3f}", flush=True)
        except Exception as e:  # report and go on with the next version
            print(f"{vdir:40} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[2] == "--job":
        check_job(sys.argv[3])
        return
    out, only = sys.argv[1], sys.argv[3:] if len(sys.argv) > 2 and sys.argv[2] == "--only" else []
    for job in sorted(glob.glob(os.path.join(out, "*/"))):
        if not only or os.path.basename(job.rstrip("/")) in only:
            subprocess.run([sys.executable, __file__, out, "--job", job])


if __name__ == "__main__":
    main()
