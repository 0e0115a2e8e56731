#!/bin/bash
# The scale ladder: run one study on each rung, one model at a time, resumable (a rung with a finished run on
# record is skipped; the studies resume a partial results file), each run's wall time and peak RSS appended
# to docs/results/ladder/costs.csv with the mean 1-minute load average while it ran (sampled every 15 s).
# Usage: paper/studies/ladder/run.sh STUDY [MODEL ...]
#   STUDY: deficit | value-sweep | parallel | compression | ruler-2k | ruler-4k | pretrain (the commands are
#   the criteria's, reproduction/ladder.json; the RULER-style items run paper/studies/ladder/ruler.sh, which keeps
#   its task folder and lm-eval outputs under runs/ladder-STUDY-MODEL)
#   MODEL: smollm2 gemma3-270m qwen2.5-0.5b qwen2.5-1.5b (all four by default); for pretrain (item 3.27, models
#   trained from scratch) byte-dDxL, a byte-level model of width D and L layers (byte-d128x4 byte-d192x8
#   byte-d256x8 by default); its results file keeps each finished (variant, seed) run, and a rung whose file
#   already holds every run of the command is skipped
# A model that does not load by name yet can be given as a GGUF file: QWEN05_GGUF=/path QWEN15_GGUF=/path.
# COSTS=docs/results/ladder/costs.csv by default (the log). BIN=.venv/bin by default (the python and geosteer run).
# DTYPE=float32 by default (bfloat16 also works; the dtype is recorded in costs.csv). THREADS=2 by default (torch
# threads; 1 and 2 give the same numbers here, the thread count is in the recorded command).
set -u
cd "$(dirname "$0")/../../.."
STUDY=$1; shift
DEFAULT="smollm2 gemma3-270m qwen2.5-0.5b qwen2.5-1.5b"
[ "$STUDY" = pretrain ] && DEFAULT="byte-d128x4 byte-d192x8 byte-d256x8"
MODELS=${*:-$DEFAULT}
DTYPE=${DTYPE:-float32}
THREADS=${THREADS:-2}
BIN=${BIN:-.venv/bin}
export GEOSTEER_PROGRESS=0
mkdir -p docs/results/ladder/$STUDY
COSTS=${COSTS:-docs/results/ladder/costs.csv}
[ -f $COSTS ] || echo "date,study,model,dtype,wall_s,peak_rss_mib,exit,command,load_avg" > $COSTS
for name in $MODELS; do
  out=docs/results/ladder/$STUDY/$name.json
  # finished = a run that exited 0 is on record; a partial results file is resumed by the study itself
  grep -q "^[^,]*,$STUDY,$name,[^,]*,[^,]*,[^,]*,0," $COSTS && [ -f "$out" ] && { echo "skip $name: done"; continue; }
  if [ "$STUDY" = pretrain ]; then
    [[ $name =~ ^byte-d([0-9]+)x([0-9]+)$ ]] || { echo "pretrain: '$name' is not byte-dDxL (e.g. byte-d192x8)"; exit 2; }
    [ "$DTYPE" = float32 ] || { echo "pretrain trains in float32 only (DTYPE=$DTYPE)"; exit 2; }
    d=${BASH_REMATCH[1]}; layers=${BASH_REMATCH[2]}
    # a file that already holds every run of the command (same steps and size) is done, with or without a log row
    $BIN/python -c "import json, sys; doc = json.load(open(sys.argv[1])); m = doc['meta']
runs = {(r['variant'], r['seed']) for r in doc['runs']}
ok = m['steps'] == 1000 and m['model']['d_model'] == $d and m['model']['layers'] == $layers
sys.exit(0 if ok and {(v, s) for v in ('baseline', 'attn_par') for s in (0, 1, 2)} <= runs else 1)" "$out" \
      2>/dev/null && { echo "skip $name: $out holds every run"; continue; }
  fi
  m=$name
  [ "$name" = qwen2.5-0.5b ] && m=${QWEN05_GGUF:-$name}
  [ "$name" = qwen2.5-1.5b ] && m=${QWEN15_GGUF:-$name}
  case $STUDY in
    deficit) cmd="$BIN/geosteer measure diagnose -m $m --tokens 2048 --context 256 --no-ov --threads $THREADS --dtype $DTYPE --out $out" ;;
    value-sweep) cmd="$BIN/geosteer study directional sweep -m $m --sites value_exclude_self,attn_out,mlp_out --value-space head,concat --s-par-grid 0,0.5,3 --s-perp-grid none --tokens 1024 --context 512 --stride 512 --threads $THREADS --dtype $DTYPE --out $out" ;;
    parallel) cmd="$BIN/geosteer study dynamics parallelize -m $m --counts 0,4,8 --seeds 5 --threshold 0.05 --defect-tokens 1024 --tokens 1024 --context 256 --cache runs/ladder-parallel-$name.losses.json --threads $THREADS --dtype $DTYPE --out $out" ;;
    compression) d=docs/results/ladder/compression/$name
      cmd="$BIN/python paper/studies/directional/compression.py --model $m --methods rtn3,awq3,gptq3,wanda50,wanda4:8,wanda2:4 --calib-seqs 16 --seq-len 128 --prompts 12 --ppl-batches 16 --out-dir $d --threads $THREADS && $BIN/python paper/studies/directional/paper_figures.py --parts table11 --compression-csv $d/compression_layers.csv --out $out" ;;
    ruler-2k) cmd="paper/studies/ladder/ruler.sh $m 2048 5 $out runs/ladder-ruler-2k-$name" ;;
    ruler-4k) cmd="paper/studies/ladder/ruler.sh $m 4096 20 $out runs/ladder-ruler-4k-$name" ;;
    pretrain) cmd="$BIN/python paper/studies/directional/pretrain_downstream.py --variants baseline,attn_par --seeds 0,1,2 --steps 1000 --d-model $d --layers $layers --eval-every 100 --proxy-n 200 --threads $THREADS --out $out" ;;
    *) echo "unknown study '$STUDY' (deficit | value-sweep | parallel | compression | ruler-2k | ruler-4k | pretrain)"; exit 2 ;;
  esac
  echo "run $name: $cmd"
  tfile=$(mktemp); lfile=$(mktemp)
  ( while :; do cut -d' ' -f1 /proc/loadavg >> "$lfile"; sleep 15; done ) & sampler=$!
  OMP_NUM_THREADS=$THREADS /usr/bin/time -v -o "$tfile" nice -n 10 bash -c "$cmd"
  rc=$?
  kill $sampler
  load=$(awk '{s+=$1; n++} END {if (n) printf "%.1f", s/n}' "$lfile")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$tfile" | awk -F: '{s=0; for(i=1;i<=NF;i++) s=s*60+$i; printf "%.0f", s}')
  rss=$(awk -F': ' '/Maximum resident set size/{printf "%.0f", $2/1024}' "$tfile")
  rm -f "$tfile" "$lfile"
  shown=${cmd//$m/$name}; shown=${shown//$BIN\//}
  echo "$(date -u +%FT%TZ),$STUDY,$name,$DTYPE,$wall,$rss,$rc,\"$shown\",$load" >> $COSTS
  echo "done $name: exit $rc, ${wall}s, peak RSS ${rss} MiB, mean load $load"
done
