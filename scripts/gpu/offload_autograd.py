#!/usr/bin/env python3
"""The saved tensor offload (python/libvmem_offload.py) against autograd's
less common paths, on a real GPU.  offload_check.py covers the plain
training step, gradient accumulation and CUDA graphs; this covers what a
user's job may also do while it is cut:

  checkpoint      torch.utils.checkpoint, non-reentrant (its own saved
                  tensor hooks inside the checkpointed blocks)
  reentrant       torch.utils.checkpoint, reentrant (the blocks' forward
                  runs again inside the backward pass: packs during it)
  retain_graph    two backward passes over one graph (every saved tensor
                  unpacked twice)
  double_backward a gradient penalty (create_graph=True: the backward pass
                  saves tensors of its own, a second backward reads them)
  lstm            cuDNN's LSTM (its reserve buffer is a saved tensor)
  compile         torch.compile (AOTAutograd saves the compiled graph's
                  activations)
  custom_function an autograd.Function saving its input and output
  dropped_graph   a forward pass whose graph is dropped without a backward
                  each step (a validation pass that forgot no_grad), beside
                  the training pass
  inplace         a saved tensor modified in place after it was saved:
                  autograd must refuse the backward as it does without the
                  offload

Each case runs in its own processes: libvmem as PyTorch's allocator, three
full steps, then the limit cut to half of the peak in use for six steps,
once with the offload (VMEM_TORCH_OFFLOAD=1) and once without.  A case
passes when every step's losses and gradient checksum are bitwise equal
between the two (or both raise the same error).  Where they differ, the case
runs without the offload a second time: if that run differs from the first
too, the case is not deterministic on this stack and says so (no verdict on
the offload).  Whether the offload acted at all (bytes out in the cut
steps), and the pinned host bytes it held at each step end, are printed
beside the verdict: a case where it did not act says nothing about it.

    bash scripts/gpu/offload-autograd.sh [CASE ...]
    AUTOGRAD_CASES=lstm,compile scripts/gpu-run.sh device scripts/gpu/offload-autograd.sh
    (AUTOGRAD_CASES=none: only the hooks' cost below)

First (HOOK_COST=0 skips it) it measures what the installed hooks cost the
CPU per saved tensor in a step that fits (a measurement, no verdict).
Exit status 0 iff no case's results differed with the offload.
"""

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
OUT = os.environ.get("OUT") or "/tmp/vmem-offload-autograd"
CASES = ["checkpoint", "reentrant", "retain_graph", "double_backward", "lstm", "compile",
         "custom_function", "dropped_graph", "inplace"]


def build(case, torch):
    """(model, step): step(i) runs one training step's passes and returns
    their losses (the optimizer step is the caller's)."""
    nn = torch.nn
    F = torch.nn.functional
    g = torch.Generator().manual_seed(7)
    d, tokens = 1024, 8192

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.up = nn.Linear(d, 2 * d)
            self.down = nn.Linear(2 * d, d)

        def forward(self, x):
            return x + self.down(torch.tanh(self.up(self.ln(x))))

    xs = [torch.randn(tokens, d, generator=g).cuda() for _ in range(2)]
    ys = [torch.randint(0, 256, (tokens,), generator=g).cuda() for _ in range(2)]

    if case == "lstm":
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.LSTM(512, 1024, num_layers=2)
                self.head = nn.Linear(1024, 256)

            def forward(self, x):
                return self.head(self.rnn(x)[0])

        model = Net().cuda()
        seqs = [torch.randn(128, 64, 512, generator=g).cuda() for _ in range(2)]
        tgts = [torch.randint(0, 256, (128 * 64,), generator=g).cuda() for _ in range(2)]

        def step(i):
            out = model(seqs[i % 2])
            loss = F.cross_entropy(out.reshape(-1, 256), tgts[i % 2])
            loss.backward()
            return [loss.item()]
        return model, step

    if case == "custom_function":
        class Swish(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x * torch.sigmoid(x)
                ctx.save_for_backward(x, y)
                ctx.scale = 1.0
                return y

            @staticmethod
            def backward(ctx, gy):
                x, y = ctx.saved_tensors
                s = torch.sigmoid(x)
                return gy * (y + s * (1 - y)) * ctx.scale

        class CBlock(Block):
            def forward(self, x):
                return x + self.down(Swish.apply(self.up(self.ln(x))))
        blocks = [CBlock() for _ in range(6)]
    else:
        blocks = [Block() for _ in range(6)]
    model = nn.Sequential(*blocks, nn.Linear(d, 256)).cuda()
    run = model
    if case == "compile":
        run = torch.compile(model)

    def fwd(x):
        if case in ("checkpoint", "reentrant"):
            from torch.utils.checkpoint import checkpoint
            h = x
            for j, b in enumerate(model[:-1]):
                # the first block plain: the reentrant variant needs an input
                # that requires grad
                if j % 2 == 1:
                    h = checkpoint(b, h, use_reentrant=(case == "reentrant"))
                else:
                    h = b(h)
            return model[-1](h)
        return run(x)

    def step(i):
        x, y = xs[i % 2], ys[i % 2]
        if case == "dropped_graph":
            with torch.enable_grad():  # a forward whose graph nobody runs backward on
                F.cross_entropy(fwd(xs[(i + 1) % 2]), ys[(i + 1) % 2])
        if case == "inplace":
            h = model[0](x)
            s = torch.sigmoid(h)  # saves its output
            s.mul_(2.0)           # ... which is then changed in place
            loss = F.cross_entropy(model[-1](model[1](s)), y)
            loss.backward()
            return [loss.item()]
        loss = F.cross_entropy(fwd(x), y)
        if case == "retain_graph":
            loss.backward(retain_graph=True)
            (loss * 0.5).backward()
        elif case == "double_backward":
            params = [p for p in model.parameters()]
            gs = torch.autograd.grad(loss, params, create_graph=True)
            pen = sum((gi * gi).sum() for gi in gs)
            (loss + 1e-3 * pen).backward()
            return [loss.item(), pen.item()]
        else:
            loss.backward()
        return [loss.item()]
    return model, step


def worker(case, result):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import framework_proof as fp
    from offload_check import cut_steps
    L = fp.load_libvmem()
    import torch
    L.install_torch(recompute=False)  # the offload alone: recomputation would take its work
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    res = {"case": case, "offload": os.environ.get("VMEM_TORCH_OFFLOAD"), "steps": []}
    model, step = build(case, torch)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    plan = (("full", None, 3), ("cut50", 0.5, 6), ("raised", 1.0, 2))
    for phase, i, _ in cut_steps(L, torch, plan, res):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        # the offload's hooks pushed during the step (HookSwitch; None: not installed)
        rec = {"phase": phase, "hooks_on": L.offload_stats().get("hooks_on")}
        try:
            rec["loss"] = step(i)
            rec["gsum"] = sum(int(p.grad.view(torch.int32).to(torch.int64).sum())
                              for p in model.parameters() if p.grad is not None)
        except Exception as e:  # the inplace case: autograd refuses the backward
            rec["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160])
        opt.step()  # the step end (install_torch's hook), also after an error
        torch.cuda.synchronize()
        rec["ms"] = (time.perf_counter() - t0) * 1e3
        o = L.offload_stats().get("last_step", {})
        rec["offloaded"] = o.get("offloaded", 0)
        rec["bulk"] = o.get("bulk", 0)  # found consumed in bulk (a skip from the next step)
        rec["host_pinned"] = o.get("host_pinned", 0)
        rec["libvmem_host_max"] = o.get("host_max", 0)
        res["steps"].append(rec)
        print(case, phase, "%.1f ms" % rec["ms"], rec.get("loss"), rec.get("gsum"),
              rec.get("error", ""), "out %d MiB (%d MiB consumed in bulk), pinned %d MiB, hooks %s" % (
                  rec["offloaded"] >> 20, rec["bulk"] >> 20, rec["host_pinned"] >> 20,
                  {True: "on", False: "off", None: "-"}[rec["hooks_on"]]), flush=True)
    res["offload_totals"] = L.offload_stats()
    with open(result, "w") as f:
        json.dump(res, f)


def hook_cost(result):
    """The CPU cost of the installed hooks in a step that fits (nothing to
    offload: every saved tensor goes through them and is kept): a small
    CPU-bound model (many small saved tensors), forward and backward timed
    with no hooks (what a step that fits pays since the hooks are pushed
    only while they may act, HookSwitch), with the bare pack/unpack, and
    with hook_pack/hook_unpack (the version check, as pushed while cut), in
    turn in one process."""
    import framework_proof as fp
    L = fp.load_libvmem()
    import torch
    import libvmem_offload as lo
    L.install_torch(recompute=False)  # the offload alone: recomputation would take its work
    nn = torch.nn
    model = nn.Sequential(*[m for _ in range(100) for m in (nn.Linear(64, 64), nn.Tanh())]).cuda()
    x = torch.randn(32, 64, device="cuda")
    off = lo._off
    ag = torch._C._autograd
    ways = {"none": None, "identity": (lambda t: t, lambda t: t), "bare": (off.pack, off.unpack),
            "checked": (off.hook_pack, off.hook_unpack)}
    saved = [0]

    def count(t):
        saved[0] += 1
        return t
    off.switch.set(False)  # a step that fits: the switch has them off already
    assert not ag._top_saved_tensors_default_hooks(True), "other saved tensor hooks pushed"
    ag._push_saved_tensors_default_hooks(count, lambda t: t)
    model(x).sum().backward()
    ag._pop_saved_tensors_default_hooks()
    res = {"saved_per_pass": saved[0], "us_per_pass": {k: [] for k in ways}}
    for _ in range(5):
        for name, hooks in ways.items():
            if hooks:
                ag._push_saved_tensors_default_hooks(*hooks)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(50):
                model(x).sum().backward()
            torch.cuda.synchronize()
            res["us_per_pass"][name].append((time.perf_counter() - t0) / 50 * 1e6)
            if hooks:
                ag._pop_saved_tensors_default_hooks()
    off.update_hooks()  # as installed
    with open(result, "w") as f:
        json.dump(res, f)


def run(case, mode, tag):
    out = os.path.join(OUT, "%s-%s%s.json" % (case, mode, tag))
    log = out[:-5] + ".log"
    with open(log, "w") as lf:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", case, out],
                           env=dict(os.environ, VMEM_TORCH_OFFLOAD=mode), stdout=lf,
                           stderr=subprocess.STDOUT, timeout=900)
    if p.returncode != 0 or not os.path.exists(out):
        with open(log) as lf:
            tail = lf.read()[-1500:]
        return {"failed": "exit %d" % p.returncode, "tail": tail}
    with open(out) as f:
        return json.load(f)


def outcome(s):
    # an error by its type and first clause (autograd's own message and the
    # offload's stand-in check name the tensor differently)
    err = s.get("error")
    return (s.get("loss"), s.get("gsum"), ":".join(err.split(":")[:2]) if err else None)


def same(a, b):
    sa, sb = a.get("steps", []), b.get("steps", [])
    return len(sa) == len(sb) and all(outcome(x) == outcome(y) for x, y in zip(sa, sb))


def main():
    if len(sys.argv) > 3 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3])
    if len(sys.argv) > 2 and sys.argv[1] == "--hook-cost":
        return hook_cost(sys.argv[2])
    env_cases = os.environ.get("AUTOGRAD_CASES")  # through gpu-run.sh, which takes no arguments
    cases = sys.argv[1:] or ([c for c in env_cases.split(",") if c and c != "none"]
                             if env_cases is not None else CASES)
    os.makedirs(OUT, exist_ok=True)
    if os.environ.get("HOOK_COST", "1") != "0":
        out = os.path.join(OUT, "hook-cost.json")
        subprocess.run([sys.executable, os.path.abspath(__file__), "--hook-cost", out],
                       env=dict(os.environ, VMEM_TORCH_OFFLOAD="1"), timeout=300)
        if os.path.exists(out):
            with open(out) as f:
                hc = json.load(f)
            med = {k: statistics.median(v) for k, v in hc["us_per_pass"].items()}
            n = hc["saved_per_pass"]
            print("hook cost (a measurement): %d saved tensors per forward+backward pass; "
                  "us per pass, median of 5 rounds: no hooks %.0f, identity hooks %.0f (%.2f us "
                  "per saved tensor), the offload's pack/unpack %.0f (%.2f), as installed "
                  "(hook_pack/hook_unpack, with the version check) %.0f (%.2f); rounds %s" % (
                      n, med["none"], med["identity"], (med["identity"] - med["none"]) / n,
                      med["bare"], (med["bare"] - med["none"]) / n,
                      med["checked"], (med["checked"] - med["none"]) / n,
                      json.dumps({k: [round(x) for x in v] for k, v in hc["us_per_pass"].items()})),
                  flush=True)
    bad = 0
    rows = []
    for case in cases:
        t0 = time.perf_counter()
        off = run(case, "0", "")
        on = run(case, "1", "")
        if "failed" in off or "failed" in on:
            verdict = "RUN FAILED (offload %s)" % ("off" if "failed" in off else "on")
            for r in (off, on):
                if "failed" in r:
                    print(r["tail"], flush=True)
            bad += 1
        elif same(off, on):
            verdict = "PASS"
        else:
            again = run(case, "0", "-again")
            if "failed" not in again and not same(off, again):
                verdict = "NOT DETERMINISTIC without the offload (no verdict)"
            else:
                verdict = "FAIL: results differ with the offload"
                bad += 1
        cut = [s for s in on.get("steps", []) if s["phase"] == "cut50"]
        acted = sum(s["offloaded"] for s in cut)
        pinned = [s["host_pinned"] >> 20 for s in on.get("steps", [])]
        errs = sorted({s["error"] for s in on.get("steps", []) if "error" in s})
        rows.append((case, verdict, acted >> 20, pinned, errs,
                     [round(s["ms"], 1) for s in cut]))
        print("%s: %s; offloaded in the cut steps %d MiB%s; pinned host MiB at each step "
              "end %s; errors %s; %.0f s" % (case, verdict, acted >> 20,
                                              "" if acted else " (THE OFFLOAD DID NOT ACT)",
                                              pinned, errs, time.perf_counter() - t0),
              flush=True)
    print("\n| case | verdict | MiB offloaded, 6 cut steps | pinned host MiB per step end |")
    print("| --- | --- | ---: | --- |")
    for case, verdict, acted, pinned, errs, _ in rows:
        print("| %s | %s | %d | %s |" % (case, verdict, acted, pinned))
    print("offload-autograd:", "PASS" if bad == 0 else "FAIL (%d)" % bad)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
