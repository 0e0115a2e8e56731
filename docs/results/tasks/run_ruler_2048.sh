#!/bin/bash
# RULER-style Table 2 rows at 2048 tokens, 4 NIAH tasks x 10 items, SmolLM2 fp32, 1 thread.
cd /work/main
export OMP_NUM_THREADS=1 PYTHONPATH=.
T=geosteer_ruler_niah_single_1_2048,geosteer_ruler_niah_single_2_2048,geosteer_ruler_niah_multikey_1_2048,geosteer_ruler_niah_multivalue_2048
run() { name=$1; args=$2
  [ -d /tmp/r2k/$name ] && ls /tmp/r2k/$name/*/results_*.json >/dev/null 2>&1 && { echo "skip $name"; return; }
  echo "== $name $(date -u +%T)"
  .venv/bin/python -m geosteer.integrations.lm_eval --model geosteer --model_args "pretrained=smollm2,dtype=float32$args" \
   --include_path /tmp/tasks2k --tasks $T --limit 10 --batch_size 1 --seed 0 --output_path /tmp/r2k/$name --log_samples 2>&1 | grep -v Warning | tail -12
  echo "== done $name $(date -u +%T)"; }
run baseline ""
run vexcl0 ",scale_site=value_exclude_self,scale_par=0"
run vexcl05 ",scale_site=value_exclude_self,scale_par=0.5"
run vfull0 ",scale_site=value_full,scale_par=0"
run resid0 ",scale_site=attn_out,scale_par=0"
