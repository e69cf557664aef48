#!/usr/bin/env python3
"""libvmem_recompute on a real GPU with PyTorch's own allocator (no libvmem
needed): the blocks it finds in the jobs cut_bench runs, and a forward and
backward with every block recomputed against one without, from the same
seed: gradients, losses and batch normalisation's running statistics must be
bitwise equal, the recomputation must run, and the bytes in use after the
forward must drop.  Prints one line per check and exits 1 on a failure.

    python3 scripts/gpu/recompute_check.py
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402
import libvmem_recompute as rcm  # noqa: E402

fails = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what), flush=True)
    if not ok:
        fails.append(what)


class Forced:
    """A reader that says the job is cut below its need: every block recomputes."""

    def __init__(self):
        self.steps = 0

    def __call__(self, device):
        return (1, torch.cuda.memory_allocated(device), 2, self.steps)


def models():
    import torchvision
    nn = torch.nn

    class Block(nn.Module):  # batch norm and dropout inside: RNG state and running stats
        def __init__(self, c):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3, padding=1)
            self.bn = nn.BatchNorm2d(c)
            self.drop = nn.Dropout(0.3)

        def forward(self, x):
            return x + self.drop(torch.relu(self.bn(self.conv(x))))

    def small():
        return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1),
                             nn.Sequential(*[Block(32) for _ in range(6)]),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

    g = torch.Generator().manual_seed(7)
    yield "small conv blocks (bn, dropout)", small, (
        torch.randn(32, 3, 64, 64, generator=g).cuda(),
        torch.randint(0, 10, (32,), generator=g).cuda()), None
    yield "resnet50", lambda: torchvision.models.resnet50(num_classes=1000), \
        (lambda g=torch.Generator().manual_seed(8): (
            torch.randn(16, 3, 224, 224, generator=g).cuda(),
            torch.randint(0, 1000, (16,), generator=g).cuda()))(), None
    try:
        import transformers
        cfg = transformers.GPT2Config(n_layer=4)
        toks = torch.randint(0, cfg.vocab_size, (2, 256),
                             generator=torch.Generator().manual_seed(9)).cuda()
        yield "gpt2 (4 layers, dropout)", lambda: transformers.GPT2LMHeadModel(cfg), \
            (toks, None), "lm"
        bcfg = transformers.BertConfig(num_hidden_layers=4)
        btoks = torch.randint(0, bcfg.vocab_size, (4, 128),
                              generator=torch.Generator().manual_seed(10)).cuda()
        yield "bert (4 layers, dropout)", lambda: transformers.BertForMaskedLM(bcfg), \
            (btoks, None), "lm"
    except ImportError as e:
        print("transformers missing: %s" % e)
    try:
        import timm
        g = torch.Generator().manual_seed(11)
        yield "vit_tiny", lambda: timm.create_model("vit_tiny_patch16_224", num_classes=1000), \
            (torch.randn(8, 3, 224, 224, generator=g).cuda(),
             torch.randint(0, 1000, (8,), generator=g).cuda()), None
    except ImportError as e:
        print("timm missing: %s" % e)


def run(make, data, kind, recompute):
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    m = make().cuda().train()
    if getattr(getattr(m, "config", None), "use_cache", None):
        # both runs without transformers' key/value cache: the layers would
        # fill it in the forward, so a call given it runs plain, and the
        # Recompute turns use_cache off from its first choice on, too late
        # for this one forward (libvmem_recompute, "_use_cache")
        m.config.use_cache = False
    rc = None
    if recompute:
        rc = rcm.Recompute(torch, m, Forced(), policy="all")
        rc.need = 2  # the forced reader's limit (1) is below it: every block recomputes
    x, y = data
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    if kind == "lm":
        loss = m(input_ids=x, labels=x).loss
    else:
        loss = torch.nn.functional.cross_entropy(m(x), y)
    after_fwd = torch.cuda.memory_allocated() - base
    loss.backward()
    torch.cuda.synchronize()
    grads = [p.grad.clone() for p in m.parameters() if p.grad is not None]
    bufs = [b.clone() for b in m.buffers()]
    st = rc.stats() if rc is not None else None
    n = len(rc.blocks) if rc is not None else len(rcm.find_blocks(torch, m))
    return loss.item(), grads, bufs, after_fwd, st, n


def main():
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    for name, make, data, kind in models():
        l0, g0, b0, m0, _, n = run(make, data, kind, False)
        l1, g1, b1, m1, st, _ = run(make, data, kind, True)
        print("%s: %d blocks; after the forward %.1f MB plain, %.1f MB recomputing; "
              "recomputations %d" % (name, n, m0 / 1e6, m1 / 1e6, st["recomputations"]))
        check(n >= 2, "%s: blocks found" % name)
        check(st["recomputations"] == n, "%s: every block recomputed once" % name)
        check(l0 == l1, "%s: loss bitwise equal (%r, %r)" % (name, l0, l1))
        check(len(g0) == len(g1) and all(torch.equal(a, b) for a, b in zip(g0, g1)),
              "%s: gradients bitwise equal" % name)
        check(len(b0) == len(b1) and all(torch.equal(a, b) for a, b in zip(b0, b1)),
              "%s: buffers (running statistics) bitwise equal" % name)
        check(m1 < m0, "%s: fewer bytes in use after the forward" % name)
    for job in ("gpt2", "bert", "vit", "convnext", "resnet50"):
        try:
            sys.path.insert(0, HERE)
            import cut_bench
            model = cut_bench.build(job, torch, 1)[0]
            bl = rcm.find_blocks(torch, model)
            names = sorted(set(type(b).__name__ for b in bl))
            print("%s: %d blocks: %s" % (job, len(bl), ", ".join(names)))
            check(len(bl) >= 4, "%s: blocks found" % job)
        except ImportError as e:
            print("%s: not built (%s)" % (job, e))
    print("recompute_check: %d failures" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
