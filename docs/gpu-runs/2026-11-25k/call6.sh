#!/usr/bin/env bash
# Forty-third session, call 6: issue 11's replay target read once more with this session's final
# library (the inlined helpers; vmem_step_exclude touches no allocation path), on an H100, four
# rounds of one torch-replay --vmem process per trace and backend: the forty-second session's
# call 3 as it is.
# Carry: build-gpu/src build-gpu/carry-cuda .carry
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25k/call6.sh
exec bash docs/gpu-runs/2026-11-25j/call3.sh
