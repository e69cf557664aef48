#!/usr/bin/env python3
"""Records allocation traces of jobs the allocator's policies were not tuned on.

usage: record_jobs.py OUTDIR JOB [JOB ...]
       record_jobs.py --list

Each JOB runs under PyTorch's own caching allocator (the process's
PYTORCH_CUDA_ALLOC_CONF decides default or expandable segments) and is
recorded with libvmem_trace.record() into OUTDIR/trace_<job>.txt.gz, with a
step line after every training step (or request, for inference jobs).  One
JSON line per job on stdout carries PyTorch's own peak_allocated and
peak_reserved for the run, so held / live of PyTorch itself is read off the
real job, not a replay.  Models are randomly initialised (no network).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def _torch():
    import torch
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return torch


def _bf16_step(torch, opt, rec, loss_of):
    """One training step as the jobs run it: the gradients let go, the loss
    under bf16 autocast, the backward pass, the optimizer, a step line."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_of()
    loss.backward()
    opt.step()
    rec.step()


def _fp16_scaled_step(torch, opt, scaler, rec, loss_of):
    """The same under fp16 autocast with a GradScaler."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_of()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    rec.step()


def vit(rec):
    """timm ViT-B/16 training, batch 64 x 224, bf16 autocast, AdamW."""
    torch = _torch()
    import timm
    model = timm.create_model("vit_base_patch16_224", num_classes=1000).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(5):
        x = torch.randn(64, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (64,), device="cuda")
        _bf16_step(torch, opt, rec, lambda: torch.nn.functional.cross_entropy(model(x), y))


def seg(rec):
    """torchvision DeepLabV3-ResNet50 segmentation training, batch 8 x 512^2, fp32, SGD."""
    torch = _torch()
    import torchvision
    model = torchvision.models.segmentation.deeplabv3_resnet50(
        weights=None, weights_backbone=None, num_classes=21, aux_loss=True).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    for _ in range(5):
        x = torch.randn(8, 3, 512, 512, device="cuda")
        y = torch.randint(0, 21, (8, 512, 512), device="cuda")
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = (torch.nn.functional.cross_entropy(out["out"], y)
                + 0.4 * torch.nn.functional.cross_entropy(out["aux"], y))
        loss.backward()
        opt.step()
        rec.step()


def t5(rec):
    """transformers T5-small (random) seq2seq training, batch 32, 512 -> 128 tokens, bf16, AdamW."""
    torch = _torch()
    from transformers import T5Config, T5ForConditionalGeneration
    model = T5ForConditionalGeneration(T5Config(vocab_size=32128, d_model=512, d_ff=2048,
                                                num_layers=6, num_heads=8)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(5):
        src = torch.randint(0, 32128, (32, 512), device="cuda")
        tgt = torch.randint(0, 32128, (32, 128), device="cuda")
        _bf16_step(torch, opt, rec, lambda: model(input_ids=src, labels=tgt).loss)


def gpt2accum(rec):
    """transformers GPT-2 (6 layers, random) training, 4 micro-batches of 4 x 1024 per step, bf16, AdamW."""
    torch = _torch()
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_layer=6)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(4):
        opt.zero_grad(set_to_none=True)
        for _ in range(4):
            tok = torch.randint(0, 50257, (4, 1024), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=tok, labels=tok).loss / 4
            loss.backward()
        opt.step()
        rec.step()


def convnext(rec):
    """timm ConvNeXt-Tiny training, channels_last, fp16 autocast with GradScaler, batch 96 x 224."""
    torch = _torch()
    import timm
    model = timm.create_model("convnext_tiny", num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(5):
        x = torch.randn(96, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (96,), device="cuda")
        _fp16_scaled_step(torch, opt, scaler, rec,
                          lambda: torch.nn.functional.cross_entropy(model(x), y))


def cnnvary(rec):
    """torchvision ResNet-34 training whose image size changes every step (128-320 px), batch 48, fp32, SGD."""
    torch = _torch()
    import torchvision
    model = torchvision.models.resnet34(num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for px in (224, 160, 288, 128, 320, 192):
        x = torch.randn(48, 3, px, px, device="cuda")
        y = torch.randint(0, 1000, (48,), device="cuda")
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        rec.step()


def llamagen(rec):
    """transformers Llama (8 layers x 1024, random) generation with a KV cache, fp16, requests of
    varying batch, prompt and output lengths (inference, no steps repeat)."""
    torch = _torch()
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).to("cuda", torch.float16).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(10):
            b = int(torch.randint(1, 17, (1,), generator=g))
            p = int(torch.randint(16, 513, (1,), generator=g))
            n = int(torch.randint(16, 129, (1,), generator=g))
            ids = torch.randint(0, 32000, (b, p), generator=g).cuda()
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, do_sample=False, pad_token_id=0)
            rec.step()


def bertserve(rec):
    """transformers BERT-base (random) inference, fp16, requests of varying batch and length."""
    torch = _torch()
    from transformers import BertConfig, BertModel
    model = BertModel(BertConfig()).to("cuda", torch.float16).eval()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _ in range(40):
            b = int(torch.randint(1, 65, (1,), generator=g))
            s = int(torch.randint(16, 513, (1,), generator=g))
            ids = torch.randint(0, 30522, (b, s), generator=g).cuda()
            model(input_ids=ids).last_hidden_state.float().mean().item()
            rec.step()


def gpt2var(rec):
    """transformers GPT-2 small (random) training, batch 8, each step's length drawn from 512, 768
    and 1024 tokens (repeating shapes in a random order), bf16 autocast, AdamW, 16 steps."""
    torch = _torch()
    import random
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pick = random.Random(7)
    for _ in range(16):
        tok = torch.randint(0, 50257, (8, pick.choice((512, 768, 1024))), device="cuda")
        _bf16_step(torch, opt, rec, lambda: model(input_ids=tok, labels=tok).loss)


def bertvar(rec):
    """transformers BERT-base (random) masked-LM training, batch 32, each step's length drawn from
    128, 256, 384 and 512 tokens, bf16 autocast, AdamW, 16 steps."""
    torch = _torch()
    import random
    from transformers import BertConfig, BertForMaskedLM
    model = BertForMaskedLM(BertConfig()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pick = random.Random(11)
    for _ in range(16):
        ids = torch.randint(0, 30522, (32, pick.choice((128, 256, 384, 512))), device="cuda")
        labels = torch.where(torch.rand(ids.shape, device="cuda") < 0.15, ids, -100)
        _bf16_step(torch, opt, rec, lambda: model(input_ids=ids, labels=labels).loss)


def cnnbuckets(rec):
    """torchvision ResNet-50 multi-scale training, each step's image size drawn from 160, 224 and
    288 px, batch 48, channels_last, fp16 autocast with GradScaler, SGD momentum, 16 steps."""
    torch = _torch()
    import random
    import torchvision
    model = torchvision.models.resnet50(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    pick = random.Random(13)
    for _ in range(16):
        px = pick.choice((160, 224, 288))
        x = torch.randn(48, 3, px, px, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (48,), device="cuda")
        _fp16_scaled_step(torch, opt, scaler, rec,
                          lambda: torch.nn.functional.cross_entropy(model(x), y))


JOBS = {f.__name__: f for f in (vit, seg, t5, gpt2accum, convnext, cnnvary, llamagen, bertserve,
                                  gpt2var, bertvar, cnnbuckets)}


def main(argv):
    if argv[1:2] == ["--list"]:
        for n, f in JOBS.items():
            print("%-10s %s" % (n, " ".join(f.__doc__.split())))
        return 0
    if len(argv) < 3 or any(j not in JOBS for j in argv[2:]):
        print(__doc__, file=sys.stderr)
        print("jobs: " + " ".join(JOBS), file=sys.stderr)
        return 2
    import libvmem_trace
    outdir, rc = argv[1], 0
    os.makedirs(outdir, exist_ok=True)
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    for job in argv[2:]:
        path = os.path.join(outdir, "trace_%s.txt.gz" % job)
        t0 = time.time()
        try:
            with libvmem_trace.record(path, workload=job + ": " + " ".join(JOBS[job].__doc__.split())) as rec:
                JOBS[job](rec)
            info = rec.info
            print(json.dumps({"job": job, "alloc_conf": conf, "trace": path,
                              "peak_allocated": info["peak_allocated"],
                              "peak_reserved": info["peak_reserved"],
                              "reserved_over_allocated": round(info["peak_reserved"] / info["peak_allocated"], 4),
                              "iters": info["iters"], "allocs": info["allocs"], "step_s": info["step_s"],
                              "wall_s": round(time.time() - t0, 1)}), flush=True)
        except Exception as e:  # one job's failure does not lose the others
            print(json.dumps({"job": job, "alloc_conf": conf, "error": repr(e)[:500]}), flush=True)
            rc = 1
        import torch
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
