#!/usr/bin/env bash
# Thirty-eighth session, call 2: call 1 again with the reference run: part 6
# now also trains the two ranks without the cut and requires the cut run's
# parameters to equal it bit for bit.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25f/call2.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
exec bash "$(dirname "$0")/call1.sh"
