#!/usr/bin/env bash
# Reproduce the dynamics studies (docs/dynamics.md). CPU, 1 thread. Steps whose output exists are skipped.
# Usage: bash docs/results/dynamics/run_studies.sh [model] [outdir] [max-layer-count]
set -euo pipefail
M=${1:-smollm2}
D=${2:-docs/results/dynamics/$M}
N=${3:-30}
G=.venv/bin/geosteer
mkdir -p "$D"
[ -f "$D/diagnose.json" ] || $G measure diagnose -m "$M" --tokens 2048 --context 256 --topk 1,4,16,32 \
  --threads 1 --out "$D/diagnose.json" --csv "$D/diagnose.csv"
[ -f "$D/ablate.json" ] || $G study dynamics ablate -m "$M" --tokens 2048 --context 256 --threads 1 --out "$D/ablate.json"
[ -f "$D/gains.json" ] || $G study dynamics gains -m "$M" --tokens 1024 --context 256 --threads 1 --out "$D/gains.json"
C=$(.venv/bin/python -c "print(','.join(str(c) for c in (0,1,2,4,6,8,10,12,15,20,25,30) if c < $N) + ',$N')")
[ -f "$D/parallel.json" ] || $G study dynamics parallelize -m "$M" --counts "$C" --seeds 5 --threshold 0.05 \
  --defect-tokens 1024 --tokens 1024 --context 256 --threads 1 --out "$D/parallel.json" --csv "$D/parallel.csv"
[ -f "$D/gates.json" ] || $G learn gates -m "$M" --out "$D/gates" --tokens 24576 --lr 0.02 --seed 0 \
  --eval-tokens 2048 --eval-context 256 --threads 1 --records "$D/gates.json"
