"""Study 3, continued (issue 14 item 8): from-scratch byte models with the gated control, scored downstream.

Same models, data, schedule and seeds as ``geosteer study directional pretrain`` (study 3 of docs/directional.md:
``geosteer_paper.directional.pretrain``), plus

- the paper's gated control (App. E, Fig. 8): ``value_gated`` = value-space parallel scaling with a learned
  tokenwise s∥ = σ(wᵀx) (``GatedParallelScale`` defaults: full aggregate, x = normed attention input, one w
  per layer shared by the heads, w = 0 at the start); its weights train with the model in the same AdamW,
  without weight decay by default (``--gate-wd``: decay would pull every gate toward s∥ = 0.5);
- downstream scores of each final model on the local proxy tasks (``geosteer.tasks.proxies``: cloze,
  next sentence, fact), multiple choice by summed log-likelihood with lm-eval's acc / acc_norm
  (``geosteer_paper.multiple_choice``, window = the training context), the variant's edit active.

For ``baseline``, ``attn_par`` and ``value_par`` the loop is ``pretrain.train_one``'s (tested equal). One
JSON holds meta, per-run finals with the proxy scores, and the curves; runs already in it with the same
settings are skipped (``--resume`` is the default), so a long study can be stopped and continued.

    python paper/studies/directional/pretrain_downstream.py --steps 1200 --seeds 0,1,2 --d-model 128 \
        --out docs/results/directional/pretrain_downstream_d128.json --threads 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from geosteer.directional.sites import ComponentScale
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.io_utils import atomic_write_json
from geosteer_paper.directional.gated import GatedParallelScale
from geosteer_paper.directional.pretrain import byte_ids, lm_loss, sample_batch, small_model, train_step
from geosteer_paper.multiple_choice import score_multiple_choice
from geosteer_paper.scripts import command_line, run_script

VARIANTS = ("baseline", "attn_par", "value_par", "value_gated")
PROXY_TASKS = ("proxy_cloze", "proxy_nextsent", "proxy_fact")


def make_interventions(variant: str, model) -> list:
    """The edit of ``variant`` for ``model`` (trainable ones are ``nn.Module`` s)."""
    if variant == "baseline":
        return []
    if variant == "attn_par":
        return [ComponentScale("attn_out", s_par=0.0)]
    if variant == "value_par":
        return [ComponentScale("value_full", s_par=0.0)]
    if variant == "value_gated":
        return [GatedParallelScale(model, "value_full")]
    raise GeosteerError(f"unknown variant '{variant}'; valid: {', '.join(VARIANTS)}")


@torch.no_grad()
def _val(model, ivs, xs: list[torch.Tensor]) -> tuple[float, float | None]:
    """Mean val loss and (gated variants) the mean s∥ over the val batches' tokens and layers."""
    model.eval()
    tot, gates = 0.0, []
    for x in xs:
        tot += lm_loss(model, x).item()
        for iv in ivs:
            if isinstance(iv, GatedParallelScale):
                gates += list(iv.mean_gate().values())
    model.train()
    return tot / len(xs), (sum(gates) / len(gates) if gates else None)


def train_variant(variant: str, seed: int, train: torch.Tensor, val_batches: list[torch.Tensor], *,
                  steps: int, batch: int, ctx: int, lr: float, eval_every: int, model_kw: dict,
                  gate_wd: float = 0.0, after=None, log=print) -> dict:
    """``pretrain.train_one``'s loop with any variant of ``VARIANTS``; ``after(model, ivs)`` runs at the end
    with the edit still attached (downstream scoring) and its result is returned as ``"after"``."""
    model = small_model(ctx=ctx, seed=seed, **model_kw)
    model.train()
    ivs = make_interventions(variant, model)
    groups = [{"params": list(model.parameters()), "weight_decay": 0.1}]
    extra = [p for iv in ivs if isinstance(iv, torch.nn.Module) for p in iv.parameters()]
    if extra:
        groups.append({"params": extra, "weight_decay": gate_wd})
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(1000 + seed)  # same data order for every variant of a seed
    params = list(model.parameters()) + extra
    curve, t0, res_after = [], time.time(), None
    with steer(model, *ivs):
        for step in range(steps):
            loss = train_step(model, opt, params, train, gen, step=step, steps=steps, lr=lr, batch=batch, ctx=ctx)
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                val, gate = _val(model, ivs, val_batches)
                row = {"variant": variant, "seed": seed, "step": step + 1, "train_loss": loss.item(),
                       "val_loss": val}
                if gate is not None:
                    row["mean_gate"] = gate
                curve.append(row)
                log(f"{variant} seed {seed} step {step + 1}: train {loss.item():.4f} val {val:.4f}"
                    + (f" gate {gate:.3f}" if gate is not None else "") + f" ({time.time() - t0:.0f} s)")
        seconds = time.time() - t0
        if after is not None:
            model.eval()
            res_after = after(model, ivs)
    return {"curve": curve, "final_val": curve[-1]["val_loss"], "params": sum(p.numel() for p in model.parameters()),
            "gate_params": sum(p.numel() for p in extra), "seconds": seconds, "after": res_after}


def proxy_scores(model, docs: dict[str, list[dict]], window: int) -> list[dict]:
    return [{"task": t, **score_multiple_choice(model, items, window=window)} for t, items in docs.items()]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--val-batches", type=int, default=16)
    ap.add_argument("--gate-wd", type=float, default=0.0, help="weight decay of the gate weights")
    ap.add_argument("--proxy-n", type=int, default=200, help="items per proxy task (0: no downstream)")
    ap.add_argument("--proxy-seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    return ap


def main(argv: list[str] | None = None) -> None:
    run_script(parser(), run, argv)


def run(a, argv) -> None:
    import json

    from geosteer.tasks.proxies import generate

    torch.set_num_threads(a.threads)
    vs = [v.strip() for v in a.variants.split(",") if v.strip()]
    for v in vs:
        if v not in VARIANTS:
            raise GeosteerError(f"unknown variant '{v}'; valid: {', '.join(VARIANTS)}")
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    model_kw = {"d_model": a.d_model, "layers": a.layers, "heads": max(1, a.d_model // 32), "ffn": 3 * a.d_model}
    meta = {"steps": a.steps, "batch": a.batch, "ctx": a.ctx, "lr": a.lr, "model": model_kw, "tokenizer": "bytes",
            "eval_every": a.eval_every, "val_batches": a.val_batches, "gate_wd": a.gate_wd, "proxy_n": a.proxy_n,
            "proxy_seed": a.proxy_seed, "gated": "GatedParallelScale(site=value_full, gate_input=normed, "
            "per_head=False, init=0)",
            # the scorer's label as the committed results record it (--resume compares meta to the letter)
            "scorer": "geosteer.eval.multiple_choice (lm-eval acc/acc_norm), window=ctx"}
    train = byte_ids("train", max_chars=4_000_000)
    held = byte_ids("heldout")
    meta["train_bytes"] = int(len(train))
    doc = {"meta": meta, "runs": [], "curves": []}
    if a.out.exists() and not a.no_resume:
        old = json.loads(a.out.read_text())
        if {k: v for k, v in old["meta"].items() if k != "commands"} != meta:
            raise GeosteerError(f"{a.out} holds runs with other settings; use another --out or --no-resume")
        doc = old
    doc["meta"].setdefault("commands", [])
    doc["meta"]["commands"].append(command_line("directional/pretrain_downstream.py", argv))
    done = {(r["variant"], r["seed"]) for r in doc["runs"]}
    g = torch.Generator().manual_seed(12345)
    vals = [sample_batch(held, g, a.batch, a.ctx) for _ in range(a.val_batches)]
    docs = {t: generate(t, a.proxy_n, a.proxy_seed) for t in PROXY_TASKS} if a.proxy_n else {}
    for seed in seeds:
        for v in vs:
            if (v, seed) in done:
                continue
            res = train_variant(v, seed, train, vals, steps=a.steps, batch=a.batch, ctx=a.ctx, lr=a.lr,
                                eval_every=a.eval_every, model_kw=model_kw, gate_wd=a.gate_wd,
                                after=(lambda m, ivs: proxy_scores(m, docs, a.ctx)) if docs else None)
            doc["runs"].append({"variant": v, "seed": seed, "final_val_loss": res["final_val"],
                                "params": res["params"], "gate_params": res["gate_params"],
                                "train_seconds": round(res["seconds"], 1), "proxy": res["after"] or [],
                                **({"final_mean_gate": res["curve"][-1]["mean_gate"]}
                                   if "mean_gate" in res["curve"][-1] else {})})
            doc["curves"] += res["curve"]
            atomic_write_json(a.out, doc)
            print(f"saved {v} seed {seed} -> {a.out}", flush=True)


if __name__ == "__main__":
    main()
