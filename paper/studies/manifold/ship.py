"""Write README.md + train.log + history.json into a trained surfaces artifact (after training).

    python paper/studies/manifold/ship.py artifacts/smollm2-surfaces --log runs/surfaces-g8.log
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from geosteer.io_utils import atomic_write_text
from geosteer.manifold import read_config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("artifact", type=Path)
    ap.add_argument("--log", type=Path, default=None, help="the training run's log file")
    a = ap.parse_args()
    doc = read_config(a.artifact)
    meta = doc["meta"]
    tr = meta["training"]
    cfg = tr["config"]
    ho = tr["heldout"]
    hist_src = Path(str(a.artifact) + ".train") / "history.json"
    rows = json.loads(hist_src.read_text())["rows"] if hist_src.is_file() else []
    if hist_src.is_file():
        shutil.copyfile(hist_src, a.artifact / "history.json")
    if a.log is not None and a.log.is_file():
        lines = [x for x in a.log.read_text().splitlines() if "warn" not in x.lower()]
        atomic_write_text(a.artifact / "train.log", "\n".join(lines) + "\n")
    every = max(1, len(rows) // 8)
    loss_lines = "\n".join(f"| {r['step']} | {r['tokens']:,} | {r['loss']:.4f} | {r['lr']:.3g} |"
                           for r in rows if r["step"] % every == 0 or r["step"] in (1, len(rows)))
    ranges = sorted({tuple(r) for r in zip(doc["lo"], doc["hi"], strict=True)})
    po = tr["parameter_overhead"]
    rel = (ho["ppl_after"] - ho["ppl_before"]) / ho["ppl_before"]
    text = f"""# Trained attention surfaces for {doc['base_model']}

A `geosteer-surfaces` artifact (load with `geosteer.manifold.load("{a.artifact}", model=model)` or pass
`--surfaces {a.artifact}` to `geosteer ppl / generate / compare`). Coefficients
(layers, heads, head_dim, K, K) = {tuple(doc['shape'])}, stored as {doc['storage_dtype']};
grid {doc['grid_size']} (K = {doc['K']}), layers
{doc['layers'][0]}–{doc['layers'][-1]}, range(s) {', '.join(f'[{lo:g}, {hi:g}]' for lo, hi in ranges)}
({'calibrated: ' + json.dumps(meta.get('calibration')) if meta.get('calibration') else 'fixed'}).
{po['surface_params']:,} parameters = {100 * po['fraction']:.3f}% of the model's {po['model_params']:,}.

Produced by (commit {doc.get('commit')}, {tr.get('threads')} CPU thread(s), {tr['seconds_this_run']:.0f} s):

    {meta['command']}

Training: {tr['tokens']:,} tokens ({tr['steps']} steps × {cfg['batch_size']} windows ×
{cfg['seq_len']} tokens) from `{tr['text']}` (corpus split or text file), AdamW lr {cfg['lr']:g}
(warmup {cfg['warmup_steps'] or '5%'}, cosine to
{cfg['min_lr_ratio']:g}×), grad clip {cfg['grad_clip']}, seed {cfg['seed']}; only the coefficients train.

Held-out strided perplexity (held-out split, context {ho['context']}, stride {ho['stride']}, first
{ho['max_tokens']:,} tokens): **{ho['ppl_before']:.4f} → {ho['ppl_after']:.4f}**
({ho['ppl_after'] - ho['ppl_before']:+.4f}, {100 * rel:+.2f}%). Final training loss {tr['final_loss']:.4f}.

| step | tokens | loss | lr |
|---:|---:|---:|---:|
{loss_lines}

Files: `surfaces.safetensors` + `geosteer_config.json` (the artifact), `history.json` (per-step loss, lr,
grad norm, tokens/s), `train.log` (the run's log).
"""
    atomic_write_text(a.artifact / "README.md", text)
    print(f"wrote {a.artifact / 'README.md'}")


if __name__ == "__main__":
    main()
