"""Error against rank of a surface bank: discarded singular-value energy and next-token KL on held-out text.

    .venv/bin/python benchmarks/manifold_low_rank.py --surfaces artifacts/smollm2-surfaces --ranks 1,2,4,8,11

Each rank r keeps the r largest singular values of every K×K coefficient matrix (``SurfaceBank.low_rank``);
the KL is KL(exact ‖ rank r) of the next-token distributions, averaged over the positions of the first
--tokens tokens of the bundled corpus' held-out split, beside KL(exact ‖ stock) for scale. Prints one line
per rank (or JSON).
"""

from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--surfaces", required=True, help="artifact folder or Hub id")
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from geosteer import load_model, manifold
    from geosteer.errors import one_line_errors
    from geosteer.eval.perplexity import heldout_ids
    from geosteer.interventions import Identity
    from geosteer.manifold.low_rank import next_token_kl, rank_report

    with one_line_errors():
        torch.set_num_threads(a.threads)
        ranks = [int(x) for x in a.ranks.split(",")]
        model, tok = load_model(a.model)
        bank = manifold.load(a.surfaces, model=model)
        ids = heldout_ids(tok, a.tokens)[None]
        rows = rank_report(model, bank, ranks, ids)
        effect = next_token_kl(model, bank, Identity(), ids)  # KL(exact ‖ stock): what the surfaces do
    if a.json:
        rec = {"argv": sys.argv[1:] if argv is None else argv, "surfaces": a.surfaces, "K": bank.K,
               "layers": bank.layers, "kl_exact_vs_stock": effect, "rows": rows}
        print(json.dumps(rec, indent=1))
        return
    print(f"surfaces: {a.surfaces} (K = {bank.K}, layers {bank.layers[0]}-{bank.layers[-1]}), {ids.numel()} tokens; "
          f"KL(exact ‖ stock) {effect:.3g} nats")
    for r in rows:
        print(f"rank {r['rank']}: discarded energy {r['discarded_energy']:.4f}, "
              f"next-token KL {r['next_token_kl']:.3g} nats")


if __name__ == "__main__":
    main()
