#!/usr/bin/env bash
# The manifold studies in order, after the main training run (docs/manifold-study.md explains each step).
# Usage: paper/studies/manifold/pipeline.sh   (waits for runs/surfaces-g8.pid / runs/lora-r36 if they are running)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
wait_pid() { if [ -f "$1" ]; then while kill -0 "$(cat "$1")" 2>/dev/null; do sleep 60; done; fi; }

# 1. main run: grid 8, layers 8-15 (started by hand; this is its command)
if [ ! -f artifacts/smollm2-surfaces/geosteer_config.json ]; then
  wait_pid runs/surfaces-g8.pid
  [ -f artifacts/smollm2-surfaces/geosteer_config.json ] || \
  .venv/bin/geosteer learn surfaces --out artifacts/smollm2-surfaces --model smollm2 --layers 8-15 --grid 8 \
    --range -4 4 --tokens 65536 --seq-len 128 --batch 8 --lr 3e-2 --seed 0 --eval-tokens 32768 \
    --checkpoint-every 8 --threads 1 --resume >> runs/surfaces-g8.log 2>&1
fi
$PY paper/studies/manifold/ship.py artifacts/smollm2-surfaces --log runs/surfaces-g8.log

# 2. output comparison (120 prompts) and steering (10 prompts + 10 wall prompts), in parallel
$PY paper/studies/manifold/steering.py compare --surfaces artifacts/smollm2-surfaces --threads 1 \
  --out docs/results/manifold_compare.json > runs/study-compare.log 2>&1 &
$PY paper/studies/manifold/steering.py steer --surfaces artifacts/smollm2-surfaces --threads 1 \
  --out docs/results/manifold_steering.json > runs/study-steer.log 2>&1 &
wait
$PY paper/studies/manifold/report.py

# 3. grid 16 at the same tokens (comparison only; not shipped)
.venv/bin/geosteer learn surfaces --out runs/smollm2-surfaces-g16 --model smollm2 --layers 8-15 --grid 16 \
  --range -4 4 --tokens 65536 --seq-len 128 --batch 8 --lr 3e-2 --seed 0 --eval-tokens 32768 \
  --checkpoint-every 8 --threads 1 --resume > runs/surfaces-g16.log 2>&1
$PY paper/studies/manifold/report.py
