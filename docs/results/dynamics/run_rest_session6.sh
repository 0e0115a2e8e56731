#!/usr/bin/env bash
# FFN steering-field rows run last (Gemma-3-270m item 2/3/5 rows, SmolLM2 finer-alpha
# continuation, alpha_F = 1.5 in the gain-by-depth sweeps). Each line is quoted in docs/dynamics.md /
# docs/dynamics-prefix.md beside its table. Run from the repository root; one study at a time.
set -uo pipefail
R=docs/results/dynamics
G=".venv/bin/geosteer study dynamics"
M="-m gemma3-270m"
export OMP_NUM_THREADS=1
t() { echo "== $* $(date -u +%T)"; /usr/bin/time -f "   %e s wall, %U s user, %M KB RSS" "$@" > /dev/null || echo "   FAILED"; }
t $G continuation $M --layer 9 --tracks 3 --steps 20 --refine-iters 8 --threads 1 --out $R/gemma3-270m/continuation_l9.json --csv $R/gemma3-270m/continuation_l9.csv
t $G basins $M --layer 9 --grid 11 --span 1 --steps 200 --dt 0.1 --tokens 512 --context 256 --residuals 256 --threads 1 --out $R/gemma3-270m/basins_l9.json --csv $R/gemma3-270m/basins_l9.csv --html $R/gemma3-270m/basins_l9.html
t $G phase $M --layer 9 --dims 2,3,8 --samples 256 --tokens 512 --context 256 --threads 1 --out $R/gemma3-270m/phase_l9.json --csv $R/gemma3-270m/phase_l9.csv
t $G split-options $M --tokens 512 --context 256 --threads 1 --out $R/gemma3-270m/split_options.json
t $G pressure $M --mode gain --betas 1.5,2 --layers 6-11 --tokens 512 --context 256 --threads 1 --out $R/gemma3-270m/pressure_gain.json
t $G anchors $M --threads 1 --prefixes 16 --prefix-len 32 --k 2 --seeds 3 --score relative --out $R/gemma3-270m/anchors_relative.json
t $G edit-specificity $M --threads 1 --layers 0,2,5,7,10,12,14,17 --prompts 8 --context 32 --seeds 5 --scale 0.1 --out $R/gemma3-270m/edit_specificity_s01.json --csv $R/gemma3-270m/edit_specificity_s01.csv
t $G edit-locality $M --threads 1 --layers 2,7,12,17 --seeds 2 --prompts 8 --context 32 --other 4 --scale 0.1 --out $R/gemma3-270m/edit_locality_s01.json --csv $R/gemma3-270m/edit_locality_s01.csv
t $G continuation -m smollm2 --layer 15 --tracks 3 --steps 40 --refine-iters 8 --threads 1 --out $R/smollm2/continuation_l15_steps40.json --csv $R/smollm2/continuation_l15_steps40.csv
t $G phase $M --layer 3 --dims 2,3,8 --samples 256 --tokens 512 --context 256 --threads 1 --out $R/gemma3-270m/phase_l3.json --csv $R/gemma3-270m/phase_l3.csv
t $G gain-depth $M --depths 0,0.125,0.25,0.375,0.5,0.625,0.75,0.875,1 --values 1.5 --tokens 512 --context 256 --threads 1 --out $R/gemma3-270m/gain_depth_a15.json
t $G gain-depth -m smollm2 --depths 0,0.0625,0.125,0.1875,0.25,0.3125,0.375,0.4375,0.5,0.5625,0.625,0.6875,0.75,0.8125,0.875,0.9375,1 --values 1.5 --tokens 512 --context 256 --threads 1 --out $R/smollm2/gain_depth_a15.json
echo "== all done $(date -u +%T)"
