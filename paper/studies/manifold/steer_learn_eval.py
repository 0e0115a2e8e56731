"""Learned steering surfaces (``geosteer learn steering-surfaces``) on held-out prompts: one JSON.

Against the reference (the surfaces the run started from, attached unedited): the mean gain of the target
continuation's teacher-forced log-prob (summed over its tokens) on the held-out target prompts, the mean drop
of the negative continuation's, and the next-token KL(P_ref ‖ P_steered) on held-out control prompts (after
each prompt, and over all positions). Means over prompts with a 95 % t interval across prompts.

    python paper/studies/manifold/steer_learn_eval.py --reference artifacts/smollm2-surfaces --learned DIR \
        --target T.json --negative N.json --controls C.json --out results.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from geosteer.interventions import steer
from geosteer.io_utils import atomic_write_json
from geosteer.manifold import load
from geosteer.manifold.wall_learn import (
    control_logprobs,
    encode_controls,
    encode_targets,
    read_controls,
    read_targets,
    target_logprob,
)
from geosteer.models.loading import load_model
from geosteer_paper.stats import mean_ci


def _logprobs(model, batch, bank):
    with torch.no_grad(), steer(model, bank):
        return target_logprob(model(input_ids=batch.ids, use_cache=False).logits, batch)


def _control(model, batch, bank):
    with torch.no_grad(), steer(model, bank):
        return control_logprobs(model(input_ids=batch.ids, use_cache=False).logits, batch)


def evaluate(model, tok, reference, learned, targets, negatives, controls) -> dict:
    tb, nb, cb = encode_targets(tok, targets), encode_targets(tok, negatives), encode_controls(tok, controls)
    ref_t, ref_n = _logprobs(model, tb, reference), _logprobs(model, nb, reference)
    ref_c, valid = _control(model, cb, reference)
    out_t, out_n = _logprobs(model, tb, learned), _logprobs(model, nb, learned)
    out_c, _ = _control(model, cb, learned)
    kl = (ref_c.exp() * (ref_c - out_c)).sum(-1)  # (n, T)
    kl_last = kl[torch.arange(kl.shape[0]), cb.lengths - 1]
    kl_all = (kl * valid).sum(-1) / valid.sum(-1)
    return {"target_gain": mean_ci(out_t - ref_t), "negative_drop": mean_ci(ref_n - out_n),
            "margin_gain": mean_ci((out_t - out_n) - (ref_t - ref_n)),
            "control_kl_next": mean_ci(kl_last), "control_kl_all": mean_ci(kl_all),
            "reference_target_logprob": float(ref_t.mean()), "reference_negative_logprob": float(ref_n.mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--reference", required=True, help="surfaces the run started from")
    ap.add_argument("--learned", required=True, nargs="+", help="geosteer learn steering-surfaces output folders")
    ap.add_argument("--target", required=True)
    ap.add_argument("--negative", required=True)
    ap.add_argument("--controls", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load_model(a.model)
    reference = load(a.reference, model=model)
    targets, negatives, controls = read_targets(a.target), read_targets(a.negative), read_controls(a.controls)
    rows = {}
    for folder in a.learned:
        rows[folder] = evaluate(model, tok, reference, load(folder, model=model), targets, negatives, controls)
        r = rows[folder]
        print(f"{folder}: target gain {r['target_gain']['mean']:.3f} nats, negative drop "
              f"{r['negative_drop']['mean']:.3f}, control KL next {r['control_kl_next']['mean']:.4f}, "
              f"all {r['control_kl_all']['mean']:.4f}")
    atomic_write_json(Path(a.out), {"model": a.model, "reference": a.reference, "target": a.target,
                                    "negative": a.negative, "controls": a.controls, "rows": rows})


if __name__ == "__main__":
    main()
