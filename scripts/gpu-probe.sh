#!/usr/bin/env bash
# Prints what the GPU machine offers that libvmem's GPU scripts rely on.
set -u
nvidia-smi -L
nvidia-smi --query-gpu=pci.bus_id,memory.total,memory.used --format=csv
nvcc --version | tail -1
which python3 meson ninja cmake
python3 - <<'PY'
import importlib
for m in ["torch", "torchvision", "transformers", "cupy", "numpy"]:
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"), getattr(mod, "__file__", ""))
    except Exception as e:
        print(m, "MISSING", e)
import torch, torch.utils.cpp_extension as c
print("torch cuda", torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0))
print("include", c.include_paths())
print("libs", c.library_paths())
PY
ls /usr/local/cuda/lib64 | grep -E 'cudart|cublas' | head
ldconfig -p | grep -E 'libcudart|libcublas|libcriterion' | head
