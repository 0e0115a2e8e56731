#!/bin/bash
# One rung of a RULER-style ladder item (3.36 at 2,048 tokens, 3.17 at 4,096): build the 4 NIAH tasks with
# the model's own tokenizer, run the baseline and V-Excl.-self s_par = 0.5 (concatenated value space), greedy,
# seed 0, and tidy both into one results file. Resumable: a finished task build or setting is skipped.
# Usage: paper/studies/ladder/ruler.sh MODEL LENGTH LIMIT OUT_JSON WORK_DIR
set -eu
M=$1; LEN=$2; LIMIT=$3; OUT_JSON=$4; W=$5
BIN=${BIN:-.venv/bin}
mkdir -p "$W"
T=""
for t in niah_single_1 niah_single_2 niah_multikey_1 niah_multivalue; do T="$T,geosteer_ruler_${t}_$LEN"; done
T=${T#,}
[ -f "$W/tasks/manifest.json" ] || $BIN/geosteer tasks build --out "$W/tasks" --model "$M" --lengths "$LEN" \
  --ruler-tasks niah_single_1,niah_single_2,niah_multikey_1,niah_multivalue --ruler-n 20 --proxy-tasks none
ev() {
  ls "$W/ruler_$1"/*/results_*.json >/dev/null 2>&1 && { echo "skip $1: done"; return; }
  $BIN/geosteer eval --model geosteer --model_args "pretrained=$M,dtype=float32$2" --include_path "$W/tasks" \
    --tasks "$T" --limit "$LIMIT" --batch_size 1 --seed 0 --output_path "$W/ruler_$1" --log_samples
}
ev baseline ""
ev vexcl05_concat ",scale_site=value_exclude_self,scale_par=0.5,scale_value_space=concat"
$BIN/python paper/studies/tasks/ruler_tidy.py baseline="$W/ruler_baseline" \
  vexcl05_concat="$W/ruler_vexcl05_concat" --out "$OUT_JSON"
