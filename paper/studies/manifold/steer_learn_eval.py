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

from geosteer.io_utils import atomic_write_json
from geosteer.manifold import load
from geosteer.models.loading import load_model
from geosteer_paper.heldout import add_prompt_options, heldout_comparison, read_prompt_sets, summary_line


def evaluate(model, tok, reference, learned, targets, negatives, controls) -> dict:
    return heldout_comparison(model, tok, [reference], [learned], targets, negatives, controls).summary(
        "reference", margin=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--reference", required=True, help="surfaces the run started from")
    ap.add_argument("--learned", required=True, nargs="+", help="geosteer learn steering-surfaces output folders")
    add_prompt_options(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load_model(a.model)
    reference = load(a.reference, model=model)
    targets, negatives, controls = read_prompt_sets(a)
    rows = {}
    for folder in a.learned:
        rows[folder] = evaluate(model, tok, reference, load(folder, model=model), targets, negatives, controls)
        print(summary_line(folder, rows[folder]))
    atomic_write_json(Path(a.out), {"model": a.model, "reference": a.reference, "target": a.target,
                                    "negative": a.negative, "controls": a.controls, "rows": rows})


if __name__ == "__main__":
    main()
