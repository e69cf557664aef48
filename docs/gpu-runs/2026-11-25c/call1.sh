#!/usr/bin/env bash
# Thirty-fifth session, call 1: the planner idling while uncapped (7bc873c) against the library
# before it (aa49ad3, carried as .carry/oldlib/src/libvmem.so.0), read as issue 11's replay
# target is: libvmem's ns/op over PyTorch's in one process, vmm and cuda, every carried trace,
# the two libraries in turn, four rounds. The comparison is the thirty-third session's call 3.
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
#        (and build-gpu/tests/{core,gpu,vmm} for the tests step run before it)
# Run: bash scripts/gpu-run.sh device tests docs/gpu-runs/2026-11-25c/call1.sh
exec bash docs/gpu-runs/2026-11-25/call3.sh
