#!/usr/bin/env bash
# FFN steering-field studies on gemma3-270m (`make gemma` first), at the SmolLM2 settings of run_geometry.sh with the
# layers mapped to the same relative depth (18 vs 30 layers). Each line is quoted in docs/dynamics.md /
# docs/dynamics-prefix.md beside its table. Run from the repository root; one study at a time.
set -euo pipefail
R=docs/results/dynamics/gemma3-270m
G=".venv/bin/geosteer study dynamics"
M="-m gemma3-270m"
export OMP_NUM_THREADS=1
$G critical $M --layers 9 --real 16 --random 16 --seed 0 --steps 1500 --threads 1 --out $R/critical_l9.json --csv $R/critical_l9.csv
$G critical $M --layers 3 --real 16 --random 16 --seed 0 --steps 1500 --threads 1 --out $R/critical_l3.json --csv $R/critical_l3.csv
$G commutator $M --tokens 256 --context 128 --threads 1 --out $R/commutator.json
$G pressure $M --betas 1,2,4 --layers 6-11 --tokens 512 --context 256 --threads 1 --out $R/pressure.json
$G pressure $M --betas 0.25,0.5 --layers 6-11 --tokens 512 --context 256 --threads 1 --out $R/pressure_soft.json
$G gain-depth $M --depths 0,0.125,0.25,0.375,0.5,0.625,0.75,0.875,1 --values 0,0.5,2 --tokens 512 --context 256 --threads 1 --out $R/gain_depth.json
$G prefix-spread $M --threads 1 --prefixes 16 --prefix-len 32 --out $R/prefix_spread.json --csv $R/prefix_spread.csv
$G edit-specificity $M --threads 1 --layers 0,2,5,7,10,12,14,17 --prompts 8 --context 32 --seeds 5 --out $R/edit_specificity.json --csv $R/edit_specificity.csv
$G anchors $M --threads 1 --prefixes 16 --prefix-len 32 --k 2 --seeds 3 --out $R/anchors.json
