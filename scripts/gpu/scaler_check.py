#!/usr/bin/env python3
"""The step hook under mixed precision, on a real GPU with PyTorch: an
iteration whose GradScaler skips the optimizer step (inf gradients) must end
one libvmem step, as an iteration that steps does (python/libvmem.py,
install_step_hook).  Both GradScaler spellings, torch.amp's and the older
torch.cuda.amp's.  Prints PASS or FAIL and exits 0 or 1.
    scripts/gpu-run.sh device scripts/gpu/scaler-check.sh
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scripts", "gpu"))


def main():
    import framework_proof as fp
    L = fp.load_libvmem()
    L.install_torch(offload=False)
    import torch
    model = torch.nn.Linear(256, 256).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device="cuda")
    ok = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp's deprecation
        scalers = (("torch.amp.GradScaler", torch.amp.GradScaler("cuda")),
                   ("torch.cuda.amp.GradScaler", torch.cuda.amp.GradScaler()))
    for name, scaler in scalers:
        got = []
        for poison in (False, True, False, True, True, False):
            s0 = L.stats()["steps"]
            scale = scaler.get_scale()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).float().pow(2).mean()
            if poison:
                loss = loss * float("inf")  # inf gradients: the scaler skips the step
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            skipped = scaler.get_scale() < scale
            got.append((poison, skipped, L.stats()["steps"] - s0))
        good = all(p == sk and n == 1 for p, sk, n in got)
        ok = ok and good
        print("%-26s (poisoned, skipped, libvmem steps ended) per iteration: %s  %s" % (
            name, got, "ok" if good else "WRONG"))
    L.remove_step_hook()
    print("GradScaler.step restored:", torch.amp.GradScaler.step.__name__ == "step" and
          not hasattr(torch.amp.GradScaler.step, "__wrapped__"))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
