#!/usr/bin/env bash
# FFN steering-field studies on smollm2 (critical geometry, commutator vs reordering, pressure, gain by depth).
# Each line is quoted in docs/dynamics.md beside its table. Run from the repository root.
set -euo pipefail
R=docs/results/dynamics/smollm2
G=".venv/bin/geosteer study dynamics"
export OMP_NUM_THREADS=1
$G critical -m smollm2 --layers 5,15 --real 16 --random 16 --seed 0 --steps 1500 --threads 1 --out $R/critical.json --csv $R/critical.csv
$G commutator -m smollm2 --tokens 256 --context 128 --threads 1 --out $R/commutator.json
$G pressure -m smollm2 --betas 1,2,4 --layers 10-19 --tokens 512 --context 256 --threads 1 --out $R/pressure.json
$G gain-depth -m smollm2 --depths 0,0.125,0.25,0.375,0.5,0.625,0.75,0.875,1 --values 0,0.5,2 --tokens 512 --context 256 --threads 1 --out $R/gain_depth.json
$G split-options -m smollm2 --tokens 512 --context 256 --threads 1 --out $R/split_options.json
$G pressure -m smollm2 --betas 0.25,0.5 --layers 10-19 --tokens 512 --context 256 --threads 1 --out $R/pressure_soft.json
$G pressure -m smollm2 --mode gain --betas 1.5,2 --layers 10-19 --tokens 512 --context 256 --threads 1 --out $R/pressure_gain.json
$G gain-depth -m smollm2 --depths 0.0625,0.1875,0.3125,0.4375,0.5625,0.6875,0.8125,0.9375 --values 0,0.5,2 --tokens 512 --context 256 --threads 1 --out $R/gain_depth_odd.json
