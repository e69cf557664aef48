#!/usr/bin/env bash
# Thirty-fifth session, call 4: the final library (2fe0194: also a step too long to record is
# idle for its rest) on another H100, read as issue 11's replay target is: libvmem's ns/op over
# PyTorch's in one process, vmm and cuda, every carried trace, three processes per pair (the
# thirty-third session's call 7).
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
#        build-gpu/tests/gpu build-gpu/tests/vmm (for the tests step run before it)
# Run: bash scripts/gpu-run.sh device tests docs/gpu-runs/2026-11-25c/call4.sh
exec bash docs/gpu-runs/2026-11-25/call7.sh
