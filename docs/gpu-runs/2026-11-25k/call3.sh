#!/usr/bin/env bash
# Forty-third session, call 3: call 1 again (f7819af against the inlined helpers of 0b8683f,
# four rounds, torch+vmm and torch+cuda) on another kind of machine, an H100, where the
# earlier sessions read the replay target most often.
# Carry: build-gpu/src build-gpu/carry-cuda .carry
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25k/call3.sh
exec bash docs/gpu-runs/2026-11-25/call3.sh
