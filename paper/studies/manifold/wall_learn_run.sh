#!/usr/bin/env bash
# Learned walls on one category, end to end and resumable: the walls, the held-out evaluation against the
# layer / top-k walls and CAA, then the dense baseline merged in. Prompts encoded as the model's tokenizer
# encodes text (pass BOS=1 for BOS first). Each finished step is skipped when run again; an interrupted
# walls or dense run continues from its checkpoint.
# Usage: paper/studies/manifold/wall_learn_run.sh CATEGORY OUTDIR RESULT.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
CAT=$1 W=$2 OUT=$3
D=src/geosteer/data/prompts/wall_learn
GS=.venv/bin/geosteer PY=.venv/bin/python
BOSFLAG=(); [ "${BOS:-0}" = 1 ] && BOSFLAG=(--bos)
mkdir -p "$W"
learn() {  # learn OUT [extra args]: fresh, or --resume from the run's checkpoint
  local out=$1; shift
  [ -f "$out/geosteer_config.json" ] && return 0
  local again=(); [ -f "$out.train/checkpoint.safetensors" ] && again=(--resume)
  $GS learn walls --surfaces artifacts/smollm2-surfaces --target-file $D/${CAT}_target_train.json \
    --control-file $D/${CAT}_control_train.json --out "$out" --seed 0 --threads 1 "${BOSFLAG[@]}" "${again[@]}" "$@"
}
learn "$W/walls" --steps 20
[ -f "$W/eval_v1.json" ] || $PY paper/studies/manifold/wall_learn_eval.py --category "$CAT" --walls "$W/walls" \
  --caa-scales 1,2,4 --caa-more 0.1,0.25 "${BOSFLAG[@]}" --out "$W/eval_v1.json"
cp "$W/eval_v1.json" "$OUT"
learn "$W/dense" --mode dense --lr 0.02 --steps 10
[ -f "$W/eval.json" ] || $PY paper/studies/manifold/wall_learn_eval.py --category "$CAT" --walls "$W/walls" \
  --dense "$W/dense" --merge "$W/eval_v1.json" "${BOSFLAG[@]}" --out "$W/eval.json"
cp "$W/eval.json" "$OUT"
echo "done: $OUT"
