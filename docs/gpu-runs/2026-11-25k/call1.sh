#!/usr/bin/env bash
# Forty-third session, call 1: the arena's allocation and free helpers inlined (src/bfc.c,
# HOT_INLINE) against the library before (f7819af, built the same way and carried as
# .carry/oldlib/src/libvmem.so.0), read as issue 11's replay target is: libvmem's ns/op over
# PyTorch's caching allocator in one process (torch-replay --vmem), vmm and cuda, every carried
# trace; the two libraries take turns, one process each per trace and backend, four rounds
# (the thirty-third session's docs/gpu-runs/2026-11-25/call3.sh). The GPU test binaries of
# core, gpu and vmm run first (tests step).
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
#        build-gpu/tests/core build-gpu/tests/gpu build-gpu/tests/vmm
# Run: bash scripts/gpu-run.sh device tests docs/gpu-runs/2026-11-25k/call1.sh
exec bash docs/gpu-runs/2026-11-25/call3.sh
