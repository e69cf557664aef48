#!/usr/bin/env python3
"""The saved tensor offload (python/libvmem_offload.py) on a real GPU: a
deterministic model trained with libvmem as PyTorch's allocator, its limit
cut to half of its peak, once with the offload and once without, must give
bitwise the same loss and gradient checksum at every step (also in steps of
two forward and backward passes: gradient accumulation); with the offload,
bytes must go out and come back ahead of use, and the cut steps must come to
fit under the limit (no libvmem host bytes at the step's maximum); a forward
and backward pass captured in a CUDA graph while cut must replay the eager
gradients bitwise, with nothing offloaded during the capture.

    bash scripts/gpu/offload-check.sh      (through scripts/gpu-run.sh device)

CUT_OFFLOAD_GPU_PACE=1 (or 0) sets the offload's pacing on the device, as in
cut_bench.py.

The model saves one tensor twice per block (x * x: the dedupe path), one
dense in another order of dimensions (as channels_last networks save), and
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
    L.install_torch(recompute=False)  # the offload alone: recomputation would take its work
    gpace = os.environ.get("CUT_OFFLOAD_GPU_PACE")  # as cut_bench.py: pacing on the device
    if gpace and L.offload_stats().get("installed"):
        import libvmem_offload
        libvmem_offload._off.gpu_pace = gpace != "0"
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
            # a saved tensor dense in another order of dimensions, as a
            # channels_last network saves: sigmoid saves its output, laid
            # out as its input (tokens of one position together)
            p = h.view(-1, 512, h.shape[-1]).transpose(0, 1).contiguous().transpose(0, 1)
            h = h + torch.sigmoid(p).reshape(h.shape)
            return x + self.down(torch.nn.functional.gelu(h))

    d, tokens = 1024, 16 * 512
    model = nn.Sequential(*[Block(d) for _ in range(8)], nn.Linear(d, 512)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(tokens, d, generator=g) for _ in range(2)]
    ys = [torch.randint(0, 512, (tokens,), generator=g) for _ in range(2)]
    res = {"offload": os.environ.get("VMEM_TORCH_OFFLOAD"), "steps": []}
    # accum50: the same cut, two forward and backward passes per step
    # (gradient accumulation), each on a whole batch
    # after50: the same cut after the capture (its blocks released)
    plan = [("full", None, 3), ("cut50", 0.5, 8), ("accum50", 0.5, 6), ("after50", 0.5, 4),
            ("raised", 1.0, 2)]
    for phase, i, last in cut_steps(L, torch, plan, res):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        losses = []
        for j in range(2 if phase == "accum50" else 1):
            k = (i + j) % 2
            loss = torch.nn.functional.cross_entropy(model(xs[k].cuda()), ys[k].cuda())
            loss.backward()
            losses.append(loss.item())
        gsum = sum(int(p.grad.view(torch.int32).to(torch.int64).sum()) for p in model.parameters())
        opt.step()
        torch.cuda.synchronize()
        s = L.stats()
        o = L.offload_stats()
        rec = {"phase": phase, "ms": (time.perf_counter() - t0) * 1e3, "loss": losses,
               "gsum": gsum, "limit": s["limit"], "offload": o.get("last_step", {})}
        res["steps"].append(rec)
        print(phase, "%.1f ms" % rec["ms"], rec["loss"], gsum, json.dumps(rec["offload"]),
              flush=True)
        if last and phase == "accum50":
            # still cut: the capture (and its side stream) comes after the passes;
            # the last step's graph (through `loss`) keeps AccumulateGrad
            # nodes made on the default stream alive, which breaks a capture
            loss = None
            res["graph"] = graph_check(L, torch, model, xs[0].cuda(), ys[0].cuda())
            # the graph is destroyed: its blocks go back (libvmem keeps a
            # captured graph's blocks until told; held, they would take
            # room from every later cut step)
            torch.cuda.synchronize()
            res["graph"]["graph_memory_held"] = L.graph_memory()[0]
            res["graph"]["graph_memory_released"] = L.release_graph_memory()
            print("graph:", json.dumps(res["graph"]), flush=True)
    res["offload_totals"] = L.offload_stats()
    with open(result, "w") as f:
        json.dump(res, f)


def cut_steps(L, torch, plan, res):
    """The steps of plan, [(phase, fraction of the peak in use or None, steps)],
    as (phase, step number, whether it is its phase's last), each after a
    device synchronisation.  A phase with a fraction first sets the limit to
    that fraction of the peak in use before the first cut (res["peak"]; 1.0:
    the start cap).  Shared with offload_autograd.py."""
    start = L.stats()["startCap"]
    i = 0
    for phase, frac, n in plan:
        if frac is not None:
            torch.cuda.synchronize()
            peak = res.setdefault("peak", L.stats()["devicePeakInUse"])
            L.set_limit(start if frac >= 1 else int(peak * frac))
        for k in range(n):
            torch.cuda.synchronize()
            yield phase, i, k == n - 1
            i += 1


def graph_check(L, torch, model, x, y):
    """While cut (the offload's budget above 0): a forward and backward
    captured in a CUDA graph and replayed give the eager gradients bitwise,
    and nothing is offloaded during the capture."""
    F = torch.nn.functional
    params = list(model.parameters())
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    ref = [p.grad.clone() for p in params]
    out = {"budget": L.offload_stats().get("budget", 0)}
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph's recipe asks
            for _ in range(2):
                model.zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
        torch.cuda.current_stream().wait_stream(side)
        model.zero_grad(set_to_none=True)
        before = L.offload_stats().get("offloaded_tensors", 0)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            F.cross_entropy(model(x), y).backward()
        out["offloaded_during_capture"] = L.offload_stats().get("offloaded_tensors", 0) - before
        for p in params:
            p.grad.zero_()
        g.replay()
        torch.cuda.synchronize()
        out["grads_equal"] = all(torch.equal(p.grad, r) for p, r in zip(params, ref))
        del g
    except Exception as e:  # reported as a failed check
        out["error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
    model.zero_grad(set_to_none=True)
    return out


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
    check(runs["1"]["offload_totals"].get("strided_bytes", 0) > 0,
          "tensors dense in another order of dimensions offloaded (their bits checked above)")
    check(any(s["offload"].get("host_max", 1) == 0 for s in cut[2:]),
          "a cut step fits under the limit (no libvmem host bytes at its maximum)")
    print("cut steps after a CUDA graph capture (its blocks released), ms without / with the "
          "offload: %s / %s (a measurement: before the capture, cut steps above)" % (
              [round(s["ms"], 1) for s in off if s["phase"] == "after50"],
              [round(s["ms"], 1) for s in on if s["phase"] == "after50"]), flush=True)
    acc = [s for s in on if s["phase"] == "accum50"]
    check(all(s["offload"].get("offloaded", 0) > s["offload"].get("budget", 0) > 0
              for s in acc[1:]),
          "two passes per step (gradient accumulation): each pass offloads, the budget is per "
          "pass (bytes out > the budget)")
    # a measurement, not a check: how fast the passes are, and why
    print("two passes per step, ms without / with the offload: %s / %s; with it, per step "
          "[MiB out, MiB back late (for want of room), libvmem host MiB]: %s" % (
              [round(s["ms"], 1) for s in off if s["phase"] == "accum50"],
              [round(s["ms"], 1) for s in acc],
              json.dumps([(s["offload"].get("offloaded", 0) >> 20, s["offload"].get("late", 0) >> 20,
                           s["offload"].get("late_no_room", 0) >> 20,
                           s["offload"].get("host_max", 0) >> 20) for s in acc])), flush=True)
    gr = runs["1"].get("graph", {})
    check(gr.get("budget", 0) > 0 and gr.get("grads_equal") is True
          and gr.get("offloaded_during_capture") == 0,
          "a CUDA graph captured while cut replays the eager gradients, nothing offloaded in "
          "the capture (%s)" % json.dumps(gr))
    # the first step after the raise also holds the graph check's passes,
    # which ran under the cut in the same libvmem step
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
