"""Learned walls vs the baselines on held-out prompts: one tidy JSON per category.

Every condition is measured against the same reference, the shipped surfaces attached unedited:

- target suppression on the held-out target prompts: mean drop of the target continuation's log-prob
  (teacher-forced, summed over its tokens), and how many greedy outputs still contain the target text
  (among the prompts whose reference greedy output contains it);
- collateral on the held-out control prompts: next-token KL(P_ref ‖ P_edit) after each prompt, the share
  of greedy outputs that change; and held-out corpus perplexity on a small slice.

Conditions: the layer-wide exact wall and the top-k norm exact wall of the manifold steering study (layer 10,
top 10), a contrastive activation-addition vector (mean residual at the last prompt token, target − control
train prompts, subtracted at the layer where it is most selective on the *training* prompts, at several
scales), dense surface fine-tuning on the same objective (``geosteer learn walls --mode dense``), and the learned walls.

    python paper/studies/manifold/wall_learn_eval.py --category elements --walls W --dense D \
        --out docs/results/manifold_wall_learn_elements.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from geosteer.eval.generation import generate
from geosteer.interventions import AddVector, steer
from geosteer.io_utils import atomic_write_json
from geosteer.manifold import load
from geosteer.manifold.edit import apply_edit
from geosteer.manifold.wall_learn import (
    control_kl,
    control_logprobs,
    encode_controls,
    encode_targets,
    read_controls,
    read_targets,
    target_logprob,
)

DATA = Path(__file__).resolve().parents[3] / "src/geosteer/data/prompts/wall_learn"


def _fwd(model, batch, **kw):
    return model(input_ids=batch.ids, use_cache=False, **kw)


@torch.no_grad()
def caa_vector(model, tb, cb, layer: int) -> torch.Tensor:
    """Mean residual (resid_post of ``layer``) at the last prompt token: target prompts − control prompts."""
    def mean_last(batch, lengths):
        hs = _fwd(model, batch, output_hidden_states=True).hidden_states[layer + 1]
        return hs[torch.arange(hs.shape[0]), lengths - 1].mean(0)

    n_prompt = torch.tensor([int(m.nonzero()[0]) + 1 for m in tb.target])  # tokens up to the last prompt token
    return mean_last(tb, n_prompt) - mean_last(cb, cb.lengths)


@torch.no_grad()
def measure(model, tok, ivs, tb, cb, ref, targets, controls, max_new: int, ppl_ids, add_bos=None) -> dict:
    """The metrics of one condition (``ivs`` attached); ``ref`` the reference's raw values or None;
    ``add_bos``: the generation's encoding (None: the tokenizer's)."""
    from geosteer.eval.perplexity import strided_perplexity

    with steer(model, *ivs):
        tlp = target_logprob(_fwd(model, tb).logits, tb)
        clp, valid = control_logprobs(_fwd(model, cb).logits, cb)
        t_txt = [generate(model, tok, t["prompt"], max_new_tokens=max_new, add_bos=add_bos).text for t in targets]
        c_txt = [generate(model, tok, p, max_new_tokens=max_new, add_bos=add_bos).text for p in controls]
        ppl = strided_perplexity(model, tok, ids=ppl_ids, context=512, stride=256, batch_size=1).ppl
    hit = [t["target"].strip().lower() in s.lower() for t, s in zip(targets, t_txt, strict=True)]
    raw = {"tlp": tlp, "clp": clp, "t_txt": t_txt, "c_txt": c_txt, "hit": hit, "ppl": float(ppl)}
    if ref is None:
        return raw
    base = [i for i, h in enumerate(ref["hit"]) if h]
    row = {
        "target_logprob": float(tlp.mean()), "target_drop": float((ref["tlp"] - tlp).mean()),
        "target_greedy_rate": sum(hit) / len(hit),
        "target_still_produced": (sum(hit[i] for i in base) / len(base)) if base else None,
        "control_kl": float(control_kl(ref["clp"], clp, valid, last_only=True, lengths=cb.lengths)),
        "control_kl_all_positions": float(control_kl(ref["clp"], clp, valid)),
        "control_greedy_changed": sum(a != b for a, b in zip(ref["c_txt"], c_txt, strict=True)) / len(c_txt),
        "ppl": float(ppl), "ppl_ratio": float(ppl) / ref["ppl"],
        "examples": [{"prompt": t["prompt"], "reference": r, "edited": s}
                     for t, r, s in list(zip(targets, ref["t_txt"], t_txt, strict=True))[:3]],
    }
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--category", required=True)
    ap.add_argument("--surfaces", default="artifacts/smollm2-surfaces")
    ap.add_argument("--walls", required=True, nargs="+", help="learned walls (geosteer learn walls artifacts)")
    ap.add_argument("--dense", default=None, help="a geosteer learn walls --mode dense artifact")
    ap.add_argument("--wall-layer", type=int, default=10)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--caa-layers", default="2,5,8,10,12,15,20,25")
    ap.add_argument("--caa-scales", default="1,2,4")
    ap.add_argument("--caa-more", default="", help="more CAA scales, measured also with --merge")
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--ppl-tokens", type=int, default=1024)
    ap.add_argument("--merge", default=None, help="earlier result of this script: keep its baseline rows "
                    "(layer/top-k walls, CAA) and measure only the reference and the given artifacts")
    ap.add_argument("--bos", action="store_true", help="encode every prompt and the perplexity text BOS first "
                    "(default: as the model's tokenizer encodes text)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    bos = True if args.bos else None
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    from geosteer import load_model
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import encode

    model, tok = load_model("smollm2")
    cat = args.category
    tr_t, tr_c = read_targets(DATA / f"{cat}_target_train.json"), read_controls(DATA / f"{cat}_control_train.json")
    targets, controls = read_targets(DATA / f"{cat}_target_heldout.json"), read_controls(
        DATA / f"{cat}_control_heldout.json")
    tb, cb = encode_targets(tok, targets, bos), encode_controls(tok, controls, bos)
    ppl_ids = encode(tok, split_text("heldout"), add_bos=bos).reshape(-1)[: args.ppl_tokens]
    surf = load(args.surfaces, model=model)
    ref = measure(model, tok, [surf], tb, cb, None, targets, controls, args.max_new_tokens, ppl_ids, bos)
    rows = [{"condition": "reference (shipped surfaces)", "method": "reference",
             "target_logprob": float(ref["tlp"].mean()),
             "target_greedy_rate": sum(ref["hit"]) / len(ref["hit"]), "ppl": ref["ppl"]}]

    def add(name, ivs, **extra):
        r = measure(model, tok, ivs, tb, cb, ref, targets, controls, args.max_new_tokens, ppl_ids, bos)
        rows.append({"condition": name, **extra, **r})
        print(f"{name}: drop {r['target_drop']:.3f} still {r['target_still_produced']} KL {r['control_kl']:.4f} "
              f"changed {r['control_greedy_changed']:.2f} ppl x{r['ppl_ratio']:.4f}", file=sys.stderr, flush=True)

    prev = None
    if args.merge:
        import json

        prev = json.loads(Path(args.merge).read_text())
        if abs(prev["rows"][0]["target_logprob"] - rows[0]["target_logprob"]) > 1e-4:
            raise SystemExit("--merge: the reference differs from the earlier run's; measure everything again")
        rows += [r for r in prev["rows"][1:] if r["condition"].startswith(("exact", "CAA"))]
    for text in (f"wall layer={args.wall_layer}", f"wall layer={args.wall_layer} top={args.top}") * (prev is None):
        b = load(args.surfaces, model=model)
        apply_edit(b, text)
        add(f"exact {text}", [b], edit=text, method="top-k wall" if "top=" in text else "layer wall")
    # contrastive activation addition: layer picked on the training prompts (drop / KL at scale 1)
    ttb, tcb = encode_targets(tok, tr_t, bos), encode_controls(tok, tr_c, bos)
    picks = prev["meta"]["caa_layer_pick"] if prev is not None else []
    with torch.no_grad(), steer(model, surf):
        t_ref = target_logprob(_fwd(model, ttb).logits, ttb)
        c_ref, c_valid = control_logprobs(_fwd(model, tcb).logits, tcb)
        for layer in [int(x) for x in args.caa_layers.split(",")] * (prev is None):
            v = caa_vector(model, ttb, tcb, layer)
            with steer(model, AddVector("resid_post", -v, layers=[layer])):
                drop = float((t_ref - target_logprob(_fwd(model, ttb).logits, ttb)).mean())
                lp, _ = control_logprobs(_fwd(model, tcb).logits, tcb)
                kl = float(control_kl(c_ref, lp, c_valid, last_only=True, lengths=tcb.lengths))
            picks.append({"layer": layer, "train_drop": drop, "train_kl": kl, "norm": float(v.norm()),
                          "ratio": drop / max(kl, 1e-6)})
    best = max(picks, key=lambda p: p["ratio"])
    with torch.no_grad(), steer(model, surf):
        vec = caa_vector(model, ttb, tcb, best["layer"])
    scales = [float(x) for x in args.caa_scales.split(",")] * (prev is None)
    for s in scales + [float(x) for x in args.caa_more.split(",") if x]:
        add(f"CAA layer {best['layer']} x{s:g}", [surf, AddVector("resid_post", -s * vec, layers=[best["layer"]])],
            layer=best["layer"], scale=s, method="caa")
    if args.dense:
        add("dense surface fine-tuning", [load(args.dense, model=model)], artifact=args.dense, method="dense")
    for path in args.walls:
        learned = load(path, model=model)
        cfg = (learned.meta.get("wall_learn") or {}).get("config") or {}
        add(f"learned walls ({len(learned.walls)} regions, tau {cfg.get('kl_threshold')})", [learned],
            artifact=path, config=cfg, regions=[w.describe() for w in learned.walls], method="learned walls")
    layer_wall = next(r for r in rows if r["condition"] == f"exact wall layer={args.wall_layer}")
    for r in rows[1:]:
        r["kl_vs_layer_wall"] = r["control_kl"] / layer_wall["control_kl"] if layer_wall["control_kl"] else None
        r["drop_vs_layer_wall"] = r["target_drop"] / layer_wall["target_drop"] if layer_wall["target_drop"] else None
    meta = {"category": cat, "model": "smollm2 (SmolLM2-135M-Instruct, fp32, CPU)", "surfaces": args.surfaces,
            "split": "train = items 1-32, held-out = items 33-48 of each list (src/geosteer/data/prompts/wall_learn)",
            "n_target_heldout": len(targets), "n_control_heldout": len(controls),
            "max_new_tokens": args.max_new_tokens, "ppl": {"tokens": int(ppl_ids.numel()), "context": 512,
                                                             "stride": 256, "split": "heldout"},
            "encoding": "bos-first" if args.bos else "tokenizer",
            "caa_layer_pick": picks, "command": "python " + " ".join(sys.argv),
            "seconds": round(time.perf_counter() - t0, 1), "threads": 1}
    if prev is not None:
        meta["baselines_from"] = {"file": args.merge, "command": prev["meta"]["command"],
                                  "seconds": prev["meta"]["seconds"]}
    atomic_write_json(args.out, {"meta": meta, "rows": rows})
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    from geosteer.errors import one_line_errors

    with one_line_errors():
        main()
