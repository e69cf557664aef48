#!/usr/bin/env python3
"""What install_torch()'s default recomputation does to real jobs, before any
cut: which model it found, its blocks, which blocks the check passed or
refused (libvmem_recompute._Purity), and whether the search hook is gone.

    python3 scripts/gpu/recompute_default.py [JOB ...]   (one process per job)
    (bash scripts/gpu-run.sh device ... with framework_proof.sh's paths, as
    scripts/gpu/cut-bench.sh sets them)

JOB: the jobs of cut_bench.py (gpt2, bert, resnet50, vit, convnext, effnet,
swin), or:
  infer    ResNet-50 in eval mode under no_grad only: the hook must be gone
           after libvmem's call budget (_FIND_CALLS module calls)
  hooked   GPT-2 with a forward hook on one block's MLP: that block's class is
           refused with a warning, the hook named
  counter  GPT-2 whose blocks count their calls in an attribute: refused
  overhead GPT-2, uncut: what the wrappers cost a full step (their reads of
           libvmem's statistics, the checks), as steps with the wrappers on
           and off (Recompute.enabled) in turn within the process
Each job prints one JSON line.  Runs a few uncut training steps only.
"""
import json
import os
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def one(job):
    import cut_bench  # the jobs' builders
    import framework_proof as fp  # sets python/ on the path; loads libvmem.so
    L = fp.load_libvmem()
    import torch
    L.install_torch()
    out = {"job": job}
    caught = []
    warnings.simplefilter("always")
    old_show = warnings.showwarning

    def show(msg, cat, *a, **kw):
        caught.append(str(msg))
        old_show(msg, cat, *a, **kw)
    warnings.showwarning = show
    if job == "infer":
        import torchvision
        model = torchvision.models.resnet50(weights=None).cuda().eval()
        x = torch.randn(8, 3, 224, 224, device="cuda")
        calls = 0
        with torch.no_grad():
            for i in range(40):
                model(x)
                calls += sum(1 for _ in model.modules())
                if i in (0, 39):
                    out["hook_after_%d_forwards" % (i + 1)] = L._find_hook is not None
        out["module_calls"] = calls
    else:
        base = "gpt2" if job in ("hooked", "counter", "overhead") else job
        model, opt, step_fn, amp = cut_bench.build(base, torch, None)
        model = model.cuda().train()
        if job == "hooked":
            blk = model.transformer.h[3]
            blk.mlp.register_forward_hook(lambda m, i, o: None)
        if job == "counter":
            cls = type(model.transformer.h[0])
            orig = cls.forward

            def counting(self, *a, **kw):
                self.calls_seen = getattr(self, "calls_seen", 0) + 1
                return orig(self, *a, **kw)
            cls.forward = counting
        scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
        adt = torch.float16 if amp == "fp16" else torch.bfloat16
        def train_step(i):
            with torch.autocast("cuda", dtype=adt, enabled=amp is not None):
                loss = step_fn(model, i)
            opt.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
        for i in range(4):
            train_step(i)
        torch.cuda.synchronize()
        out["hook_left"] = L._find_hook is not None
        if job == "overhead":
            import statistics
            import time
            import libvmem_recompute as rcm
            rc = rcm._rc[0]
            ms = {True: [], False: []}
            for rnd in range(12):
                on = rnd % 2 == 0
                rc.enabled = on
                for i in range(5):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    train_step(i)
                    torch.cuda.synchronize()
                    if i:  # the first of each run of five is left out
                        ms[on].append((time.perf_counter() - t0) * 1e3)
            rc.enabled = True
            out["step_ms_wrappers_on"] = round(statistics.median(ms[True]), 2)
            out["step_ms_wrappers_off"] = round(statistics.median(ms[False]), 2)
            out["on_over_off"] = round(statistics.median(ms[True]) /
                                       statistics.median(ms[False]), 4)
    rs = L.recompute_stats()
    out.update({k: rs.get(k) for k in ("installed", "blocks", "checked", "unsafe",
                                        "require_safe", "need", "chosen")})
    import libvmem_recompute as rcm
    if rcm._rc:
        out["block_class"] = sorted(set(type(b).__name__ for b in rcm._rc[0].blocks))
    out["warnings"] = [w for w in caught if "libvmem" in w]
    print(json.dumps(out), flush=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        one(sys.argv[2])
        return 0
    jobs = sys.argv[1:] or ["gpt2", "bert", "resnet50", "vit", "convnext", "effnet", "swin",
                            "infer", "hooked", "counter"]
    bad = 0
    for j in jobs:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", j],
                           capture_output=True, text=True, timeout=300)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        print(lines[-1] if lines else json.dumps({"job": j, "rc": r.returncode,
                                                  "err": r.stderr[-800:]}), flush=True)
        bad += r.returncode != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
