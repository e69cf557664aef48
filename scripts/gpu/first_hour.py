"""The workers of scripts/gpu/first-hour.sh (issue 13), one per process:

  cnn OUTDIR          ResNet-18 training, 4 steps, recorded the way a PyTorch user
                      does it (_record_memory_history + _dump_snapshot), converted
                      with the vmem-snapshot2trace command line
  transformer OUTDIR  a small transformer language model training, 4 steps,
                      recorded live with libvmem_trace.record()
  numba               Numba on libvmem through the EMM plugin (libvmem_numba):
                      arrays three times the device limit, a kernel over them,
                      results checked, spills and frees counted

Each prints one JSON line ("first_hour": ...) and exits non-zero on a failed check.
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
MiB = 1 << 20


def emit(obj):
    print(json.dumps(obj), flush=True)


def cnn(outdir):
    import torch
    import torchvision
    torch.manual_seed(0)
    dev = torch.device("cuda")
    snap = os.path.join(outdir, "resnet18.pickle")
    torch.cuda.memory._record_memory_history(context=None)
    t0 = time.time()
    model = torchvision.models.resnet18(num_classes=100).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(64, 3, 96, 96, device=dev)
    y = torch.randint(0, 100, (64,), device=dev)
    for _ in range(4):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    wall = time.time() - t0
    torch.cuda.memory._dump_snapshot(snap)
    torch.cuda.memory._record_memory_history(enabled=None)
    peak_alloc = torch.cuda.max_memory_allocated()
    trace = os.path.join(outdir, "trace_resnet18.txt.gz")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "python", "libvmem_trace.py"), snap,
                        "-o", trace, "--workload", "resnet18-train-b64-96px-4steps"],
                       capture_output=True, text=True)
    os.remove(snap)  # large (frames): only the trace is kept
    emit({"first_hour": "cnn", "convert_exit": r.returncode, "convert": (r.stdout + r.stderr).strip(),
          "torch_peak_allocated": peak_alloc, "wall_s": round(wall, 2), "trace": trace})
    return r.returncode


def transformer(outdir):
    import torch
    import libvmem_trace
    torch.manual_seed(0)
    dev = torch.device("cuda")
    vocab, d, layers, seq, batch = 8192, 256, 4, 256, 16
    trace = os.path.join(outdir, "trace_tinylm.txt.gz")
    with libvmem_trace.record(trace, workload="tiny-transformer-lm-4x256-b16x256-bf16-adamw") as rec:
        emb = torch.nn.Embedding(vocab, d)
        enc = torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(d, 4, 4 * d, batch_first=True, norm_first=True),
            layers, enable_nested_tensor=False)  # (unused with norm_first; says so in a warning)
        head = torch.nn.Linear(d, vocab)
        model = torch.nn.Sequential(emb, enc, head).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(seq, device=dev)
        for _ in range(4):
            tok = torch.randint(0, vocab, (batch, seq + 1), device=dev)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = enc(emb(tok[:, :-1]), mask=mask, is_causal=True)
                logits = head(h)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab),
                                                     tok[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            rec.step()
    info = rec.info
    emit({"first_hour": "transformer", "trace": trace, "allocs": info["allocs"],
          "frees": info["frees"], "peak_live": info["peak_live"],
          "torch_peak_allocated": info["peak_allocated"], "iters": info["iters"],
          "step_s": info["step_s"]})
    return 0


def _numpy_row_stack_shim(np):
    """WORKAROUND for an incompatible numba-cuda / NumPy pair (the lent GPU
    machine's, seen 2026-11-22: every kernel compile failed with
    "AttributeError: module 'numpy' has no attribute 'row_stack'").  NumPy
    2.5 removed np.row_stack (deprecated since 2.0, np.vstack under another
    name); numba-cuda (0.30.4 and earlier at least) still registers an
    overload for it when its typing registries load, i.e. at the first kernel
    compile (NVIDIA/numba-cuda issue 907; numba-cuda is in maintenance mode
    and will not fix it).  Test harness only, never in the library: it must
    run before numba.cuda compiles anything.  A user with the same pair fixes
    it with numpy<2.5 (the README's Troubleshooting section).  Returns whether
    it was applied; the JSON line reports it with both versions."""
    if hasattr(np, "row_stack"):
        return False

    def row_stack(tup, **kwargs):  # NumPy < 2.5's np.row_stack: np.vstack under another name
        return np.vstack(tup, **kwargs)

    # (a function of its own, not np.vstack itself, so that numba-cuda's two
    # overloads, vstack's and row_stack's, stay registered on two keys)
    np.row_stack = row_stack
    return True


def numba_emm():
    import gc
    from importlib import metadata
    import numpy as np
    shim = _numpy_row_stack_shim(np)
    from numba import cuda
    import libvmem
    import libvmem_numba  # noqa: F401  (NUMBA_CUDA_MEMORY_MANAGER names it too)

    @cuda.jit
    def axpy(out, a, x, y):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + y[i]

    n = 16 << 20  # 64 MiB per float32 array, three arrays against a 64 MiB limit
    x = cuda.to_device(np.arange(n, dtype=np.float32))
    y = cuda.to_device(np.ones(n, dtype=np.float32))
    out = cuda.device_array(n, dtype=np.float32)
    axpy[(n + 255) // 256, 256](out, np.float32(2.0), x, y)
    res = out.copy_to_host()
    want = 2.0 * np.arange(n, dtype=np.float32) + 1.0
    ok_values = bool(np.array_equal(res, want))
    mgr = type(cuda.current_context().memory_manager).__name__
    info = cuda.current_context().get_memory_info()
    s = libvmem.stats()
    del x, y, out
    gc.collect()
    cuda.synchronize()
    s2 = libvmem.stats()
    checks = {
        "values": ok_values,
        "manager": mgr == "VmemNumbaManager",
        "spilled": s["spills"] >= 1 and s["hostInUse"] >= 64 * MiB,
        "limit_reported": info.total == s["limit"],
        "freed": s2["frees"] - s["frees"] >= 3,
    }
    try:
        ncuda = metadata.version("numba-cuda")
    except metadata.PackageNotFoundError:
        ncuda = None
    emit({"first_hour": "numba", "checks": checks, "manager": mgr, "limit": s["limit"],
          "numpy": np.__version__, "numba_cuda": ncuda, "row_stack_shim": shim,
          "device_in_use": s["deviceInUse"], "host_in_use": s["hostInUse"],
          "spills": s["spills"], "memory_info": [info.free, info.total],
          "in_use_after_del": s2["deviceInUse"] + s2["hostInUse"]})
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "cnn":
        sys.exit(cnn(sys.argv[2]))
    if what == "transformer":
        sys.exit(transformer(sys.argv[2]))
    if what == "numba":
        sys.exit(numba_emm())
    sys.exit("usage: first_hour.py cnn|transformer OUTDIR | numba")
