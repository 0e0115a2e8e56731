#!/bin/bash
# RULER-style retrieval at 4,096 tokens (4 NIAH tasks x 5 items), SmolLM2 fp32, all 30 layers: baseline and
# V-Excl.-self s_par 0.5 in both value spaces (paper 3, Table 8). One thread; a setting whose results exist is
# skipped (rerun to resume). Tidy: python paper/studies/tasks/ruler_tidy.py (see the last line).
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 GEOSTEER_PROGRESS=0
OUT=${OUT:-/tmp/ruler_4096}
mkdir -p $OUT
[ -f $OUT/tasks/manifest.json ] || geosteer tasks build --out $OUT/tasks --model smollm2 --lengths 4096 \
  --ruler-tasks niah_single_1,niah_single_2,niah_multikey_1,niah_multivalue --ruler-n 20 --proxy-tasks none
T=geosteer_ruler_niah_single_1_4096,geosteer_ruler_niah_single_2_4096,geosteer_ruler_niah_multikey_1_4096,geosteer_ruler_niah_multivalue_4096
VX=",scale_site=value_exclude_self"
ev() { name=$1; args=$2
  ls $OUT/$name/*/results_*.json >/dev/null 2>&1 && return
  geosteer eval --model geosteer --model_args "pretrained=smollm2,dtype=float32$args" --include_path $OUT/tasks \
    --tasks $T --limit 5 --batch_size 1 --seed 0 --output_path $OUT/$name --log_samples; }
ev ruler_baseline ""
ev ruler_vexcl05_concat "$VX,scale_par=0.5,scale_value_space=concat"
ev ruler_vexcl05_head "$VX,scale_par=0.5,scale_value_space=head"
python paper/studies/tasks/ruler_tidy.py baseline=$OUT/ruler_baseline vexcl05_concat=$OUT/ruler_vexcl05_concat \
  vexcl05_head=$OUT/ruler_vexcl05_head --out docs/results/directional/ruler_4096_smollm2.json
