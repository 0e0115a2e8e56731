"""Learned ∥/⊥ scales (``geosteer learn scales``) on held-out prompts: one JSON.

Against the stock model: the mean gain of the target continuation's teacher-forced log-prob (summed over its
tokens) on the held-out target prompts, the mean drop of the negative continuation's, and the KL(P_stock ‖
P_steered) on held-out control prompts (after each prompt, and over all its positions). Means over prompts
with a 95 % t interval across prompts. ``--recipe`` takes the recipe folders the study wrote.

    python paper/studies/directional/steer_learn_eval.py --recipe OUT --target T.json --negative N.json \
        --controls C.json --out results.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from geosteer.errors import one_line_errors
from geosteer.io_utils import atomic_write_json
from geosteer.models.loading import load_model
from geosteer.recipe import load_recipe
from geosteer_paper.heldout import add_prompt_options, heldout_comparison, read_prompt_sets, summary_line


def evaluate(model, tok, interventions, targets, negatives, controls) -> dict:
    return heldout_comparison(model, tok, [], interventions, targets, negatives, controls).summary("stock")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--recipe", required=True, nargs="+", help="recipe folders of the study")
    add_prompt_options(ap)
    a = ap.parse_args()
    targets, negatives, controls = read_prompt_sets(a)
    specs = {folder: load_recipe(folder)[0] for folder in a.recipe}
    torch.set_num_threads(a.threads)
    model, tok = load_model(a.model)
    rows = {}
    for folder, spec in specs.items():
        rows[folder] = evaluate(model, tok, spec.build(model), targets, negatives, controls)
        print(summary_line(folder, rows[folder]))
    atomic_write_json(Path(a.out), {"model": a.model, "target": a.target, "negative": a.negative,
                                    "controls": a.controls, "command": "python " + " ".join(sys.argv),
                                    "rows": rows})


if __name__ == "__main__":
    with one_line_errors():
        main()
