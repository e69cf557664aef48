#!/usr/bin/env bash
# Thirty-fifth session, call 5: the live map's key and value in one slot (the commit after
# 2fe0194) against 2fe0194's library (carried as .carry/oldlib/src/libvmem.so.0, with its CUDA
# runtime in .carry/oldlib/carry-cuda), read as issue 11's replay target: libvmem's ns/op over
# PyTorch's in one process, vmm and cuda, every carried trace, the two libraries in turn, four
# rounds (the thirty-third session's call 3).
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25c/call5.sh
exec bash docs/gpu-runs/2026-11-25/call3.sh
