#!/bin/bash
# RULER-style retrieval (4 NIAH tasks x 5 items), SmolLM2 fp32, all 30 layers: baseline and V-Excl.-self
# s_par 0.5 in both value spaces (paper 3, Table 8). Usage: run_ruler.sh [LENGTH] [SETTING ...]
# (LENGTH 4096 by default; settings: baseline vexcl05_concat vexcl05_head, all by default). One thread; a
# setting whose results exist is skipped (rerun to resume); the tidy file is written once all three exist.
# LIMIT=20 takes 20 items per task (5 by default; the tidy file then gets an _n20 suffix).
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 GEOSTEER_PROGRESS=0
L=${1:-4096}; shift
SETTINGS=${*:-baseline vexcl05_concat vexcl05_head}
LIMIT=${LIMIT:-5}
SUFFIX=$([ "$LIMIT" = 5 ] || echo "_n$LIMIT")
OUT=${OUT:-/tmp/ruler_$L$SUFFIX}
mkdir -p $OUT
[ -f $OUT/tasks/manifest.json ] || geosteer tasks build --out $OUT/tasks --model smollm2 --lengths $L \
  --ruler-tasks niah_single_1,niah_single_2,niah_multikey_1,niah_multivalue --ruler-n 20 --proxy-tasks none
T=$(echo niah_single_1 niah_single_2 niah_multikey_1 niah_multivalue | tr ' ' '\n' | sed "s/.*/geosteer_ruler_&_$L/" | paste -sd,)
VX=",scale_site=value_exclude_self,scale_par=0.5"
declare -A ARGS=([baseline]="" [vexcl05_concat]="$VX,scale_value_space=concat" [vexcl05_head]="$VX,scale_value_space=head")
for name in $SETTINGS; do
  ls $OUT/ruler_$name/*/results_*.json >/dev/null 2>&1 && continue
  geosteer eval --model geosteer --model_args "pretrained=smollm2,dtype=float32${ARGS[$name]}" --include_path $OUT/tasks \
    --tasks $T --limit $LIMIT --batch_size 1 --seed 0 --output_path $OUT/ruler_$name --log_samples
done
for name in baseline vexcl05_concat vexcl05_head; do ls $OUT/ruler_$name/*/results_*.json >/dev/null 2>&1 || exit 0; done
python paper/studies/tasks/ruler_tidy.py baseline=$OUT/ruler_baseline vexcl05_concat=$OUT/ruler_vexcl05_concat \
  vexcl05_head=$OUT/ruler_vexcl05_head --out docs/results/directional/ruler_${L}${SUFFIX}_smollm2.json
