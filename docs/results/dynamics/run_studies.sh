#!/usr/bin/env bash
# Reproduce the dynamics studies on the default model (SmolLM2-135M). CPU, 1 thread, ~40 min on 2 shared cores.
# Usage: bash docs/results/dynamics/run_studies.sh [model] [outdir]
set -euo pipefail
M=${1:-smollm2}
D=${2:-docs/results/dynamics/$M}
G=.venv/bin/geosteer
mkdir -p "$D"
$G dynamics diagnose -m "$M" --tokens 2048 --seq-len 256 --topk 1,4,16,32 --threads 1 --out "$D/diagnose.json" --csv "$D/diagnose.csv"
$G dynamics ablate -m "$M" --tokens 2048 --seq-len 256 --threads 1 --out "$D/ablate.json"
$G dynamics gains -m "$M" --tokens 2048 --seq-len 256 --threads 1 --out "$D/gains.json"
$G dynamics parallelize -m "$M" --counts 0,1,2,3,4,6,8,10,12,15,20,25,30 --seeds 5 --threshold 0.05 \
  --defect-tokens 1024 --tokens 1536 --seq-len 256 --threads 1 --out "$D/parallel.json" --csv "$D/parallel.csv"
$G dynamics gates -m "$M" --save "$D/gates" --train-tokens 49152 --lr 0.02 --seed 0 \
  --tokens 2048 --seq-len 256 --threads 1 --out "$D/gates.json"
