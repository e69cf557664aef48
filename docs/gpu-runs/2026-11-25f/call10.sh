#!/usr/bin/env bash
# Thirty-eighth session, call 10: issue 11's replay target with this session's library
# (d0b4751's build; the library changed only in the placement planner under a limit) against
# the thirty-seventh session's starting library (73d8ff2, carried as .carry/oldlib), four
# rounds: the thirty-third session's call 3 script.
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-libs build-gpu/carry-cuda .carry
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25f/call10.sh
exec bash docs/gpu-runs/2026-11-25/call3.sh
