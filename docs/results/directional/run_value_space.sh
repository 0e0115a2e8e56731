#!/bin/bash
# Paper 3's value space, both readings: Fig. 3 left (SmolLM2 4,096 tokens, Gemma-3-270m 2,048 tokens,
# s_par 0, 0.5, 3), RULER-style 2048 (4 NIAH tasks x 5 items) and the Table-1 proxies (n = 100), SmolLM2.
# One thread; every step skips what an earlier run finished. Tidy with ruler_tidy.py / table1_tidy.py.
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 GEOSTEER_PROGRESS=0
OUT=${OUT:-/tmp/value_space}
D=docs/results/directional
mkdir -p $OUT
geosteer study directional sweep -m smollm2 --sites value_exclude_self --value-space head,concat \
  --s-par-grid 0,0.5,3 --s-perp-grid none --no-controls --tokens 4096 --context 512 --stride 512 --threads 1 \
  --out $D/value_space_sweep_smollm2.json
geosteer study directional sweep -m gemma3-270m --sites value_exclude_self --value-space head,concat \
  --s-par-grid 0,0.5,3 --s-perp-grid none --no-controls --tokens 2048 --context 512 --stride 512 --threads 1 \
  --out $D/value_space_sweep_gemma3.json
[ -f $OUT/tasks/manifest.json ] || geosteer tasks build --out $OUT/tasks --model smollm2 --lengths 2048 --ruler-n 20 --proxy-n 200
ev() { name=$1; tasks=$2; limit=$3; args=$4
  ls $OUT/$name/*/results_*.json >/dev/null 2>&1 && return
  geosteer eval --model geosteer --model_args "pretrained=smollm2,dtype=float32$args" --include_path $OUT/tasks \
    --tasks $tasks --limit $limit --batch_size 1 --seed 0 --output_path $OUT/$name --log_samples; }
T=geosteer_ruler_niah_single_1_2048,geosteer_ruler_niah_single_2_2048,geosteer_ruler_niah_multikey_1_2048,geosteer_ruler_niah_multivalue_2048
P=geosteer_proxy_cloze,geosteer_proxy_nextsent
VX=",scale_site=value_exclude_self"
ev ruler_baseline $T 5 ""
ev ruler_vexcl05_concat $T 5 "$VX,scale_par=0.5,scale_value_space=concat"
ev ruler_vexcl05_head $T 5 "$VX,scale_par=0.5,scale_value_space=head"
ev vexcl0_concat $P 100 "$VX,scale_par=0,scale_value_space=concat"
python paper/studies/tasks/ruler_tidy.py baseline=$OUT/ruler_baseline vexcl05_concat=$OUT/ruler_vexcl05_concat \
  vexcl05_head=$OUT/ruler_vexcl05_head --out $D/value_space_ruler_2048_smollm2.json
python paper/studies/tasks/table1_tidy.py $OUT/vexcl0_concat --out $D/value_space_proxy_smollm2.json
