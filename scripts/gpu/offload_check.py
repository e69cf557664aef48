#!/usr/bin/env python3
"""The saved tensor offload (python/libvmem_offload.py) on a real GPU: a
deterministic model trained with libvmem as PyTorch's allocator, its limit
cut to half of its peak, once with the offload and once without, must give
bitwise the same loss and gradient checksum at every step; with the offload,
bytes must go out and come back ahead of use, and the cut steps must come to
fit under the limit (no libvmem host bytes at the step's maximum).

    bash scripts/gpu/offload-check.sh      (through scripts/gpu-run.sh device)

The model saves one tensor twice per block (x * x: the dedupe path) and
repeats same-shaped blocks (a later tensor at a freed tensor's address must
not be taken for it).  Exit status 0 iff every check passed.
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
OUT = os.environ.get("OUT") or "/tmp/vmem-offload"


def worker(result):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import framework_proof as fp
    L = fp.load_libvmem()
    import torch
    L.install_torch()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)

        def forward(self, x):
            h = self.up(self.ln(x))
            h = h * h  # saves h twice: one offload, a dedupe hit
            return x + self.down(torch.nn.functional.gelu(h))

    d, tokens = 1024, 16 * 512
    model = nn.Sequential(*[Block(d) for _ in range(8)], nn.Linear(d, 512)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(tokens, d, generator=g) for _ in range(2)]
    ys = [torch.randint(0, 512, (tokens,), generator=g) for _ in range(2)]
    res = {"offload": os.environ.get("VMEM_TORCH_OFFLOAD"), "steps": []}
    plan = [("full", None, 3), ("cut50", 0.5, 8), ("raised", 1.0, 2)]
    start = L.stats()["startCap"]
    i = 0
    for phase, frac, n in plan:
        if frac is not None:
            torch.cuda.synchronize()
            peak = res.setdefault("peak", L.stats()["devicePeakInUse"])
            L.set_limit(start if frac >= 1 else int(peak * frac))
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(xs[i % 2].cuda()), ys[i % 2].cuda())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gsum = sum(int(p.grad.view(torch.int32).to(torch.int64).sum()) for p in model.parameters())
            opt.step()
            torch.cuda.synchronize()
            s = L.stats()
            o = L.offload_stats()
            rec = {"phase": phase, "ms": (time.perf_counter() - t0) * 1e3, "loss": loss.item(),
                   "gsum": gsum, "limit": s["limit"], "offload": o.get("last_step", {})}
            res["steps"].append(rec)
            print(phase, "%.1f ms" % rec["ms"], rec["loss"], gsum, json.dumps(rec["offload"]),
                  flush=True)
            i += 1
    res["offload_totals"] = L.offload_stats()
    with open(result, "w") as f:
        json.dump(res, f)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        return worker(sys.argv[2])
    os.makedirs(OUT, exist_ok=True)
    runs = {}
    for mode in ("0", "1"):
        out = os.path.join(OUT, "offload-check-%s.json" % mode)
        print("== VMEM_TORCH_OFFLOAD=%s" % mode, flush=True)
        subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", out],
                       env=dict(os.environ, VMEM_TORCH_OFFLOAD=mode), timeout=600)
        with open(out) as f:
            runs[mode] = json.load(f)
    off, on = runs["0"]["steps"], runs["1"]["steps"]
    ok = True

    def check(cond, what):
        nonlocal ok
        print("%s: %s" % ("PASS" if cond else "FAIL", what), flush=True)
        ok = ok and cond

    check(len(off) == len(on) and all(a["loss"] == b["loss"] for a, b in zip(off, on)),
          "losses bitwise equal with and without the offload")
    check(all(a["gsum"] == b["gsum"] for a, b in zip(off, on)),
          "gradient checksums bitwise equal with and without the offload")
    cut = [s for s in on if s["phase"] == "cut50"]
    check(sum(s["offload"].get("offloaded", 0) for s in cut) > 0, "bytes offloaded while cut")
    check(sum(s["offload"].get("prefetched", 0) for s in cut) > 0, "bytes fetched ahead of use")
    check(any(s["offload"].get("host_max", 1) == 0 for s in cut[2:]),
          "a cut step fits under the limit (no libvmem host bytes at its maximum)")
    # the first step after the raise still runs on the cut's budget
    fits = [s for s in on if s["phase"] == "full"] + on[-1:]
    check(all(s["offload"].get("offloaded", 0) == 0 for s in fits),
          "nothing offloaded in steps that fit with room (full, the last after the raise)")
    print("cut step ms without / with the offload: %s / %s" % (
        [round(s["ms"], 1) for s in off if s["phase"] == "cut50"],
        [round(s["ms"], 1) for s in cut]), flush=True)
    print("offload totals:", json.dumps(runs["1"]["offload_totals"]))
    print("offload-check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
