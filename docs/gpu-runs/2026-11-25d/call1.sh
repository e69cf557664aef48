#!/usr/bin/env bash
# Thirty-sixth session, call 1: the chunk struct in two whole cache lines, the fields the best
# fit and a free's coalescing read of other chunks in the first, and a dedicated-region flag
# copied into each chunk (the working tree) against the library before it (35e0a82, carried as
# .carry/oldlib/src/libvmem.so.0 with its CUDA runtime in .carry/oldlib/carry-cuda), read as
# issue 11's replay target is: libvmem's ns/op over PyTorch's in one process, vmm and cuda,
# every carried trace, the two libraries in turn, four rounds (the thirty-third session's
# call 3).
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
#        build-gpu/tests/gpu build-gpu/tests/vmm (for the tests step run before it)
# Run: bash scripts/gpu-run.sh device tests docs/gpu-runs/2026-11-25d/call1.sh
exec bash docs/gpu-runs/2026-11-25/call3.sh
