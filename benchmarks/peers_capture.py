"""Residual-stream capture at every layer (512 tokens): geosteer Recorder vs raw hooks vs nnsight vs
TransformerLens' TransformerBridge; ratios to the stock forward measured in the same run.

All sides run the same weights on the same ids; the stock forward and the peers use HF's SDPA attention,
geosteer its registered attention function (bit-identical when neutral). nnsight and TransformerLens
change the modules they wrap, so each gets its own copy of the model (the stock side stays untouched).
Before timing, every side's captured tensors are checked against the raw hooks' (max abs difference).

    .venv/bin/python benchmarks/peers_capture.py --tokens 512 --repeats 5 --threads 2

Peers are optional (``pip install 'geosteer[bench]'``); a missing one is reported and skipped.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import envoy_at, interleaved, machine, module_path, ratios, set_attention  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma-separated peers to skip (nnsight,transformer_lens)")
    ap.add_argument("--out", default=None, help="also write the figures as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))

    from geosteer import load_model
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import encode
    from geosteer.interventions import steer
    from geosteer.models.anatomy import anatomy
    from geosteer.record import Recorder

    model, tok = load_model(args.model)
    ids = encode(tok, split_text("heldout", max_chars=args.tokens * 8))[: args.tokens][None]
    layers = [b.layer for b in anatomy(model).blocks]
    paths = [module_path(model, m) for m in layers]
    sdpa = lambda: set_attention(model, "sdpa")  # noqa: E731
    ours = lambda: set_attention(model, "geosteer")  # noqa: E731

    @torch.no_grad()
    def stock():
        return model(ids)

    @torch.no_grad()
    def raw_hooks():
        got = []
        hs = [m.register_forward_hook(lambda mod, a, out: got.append((out[0] if isinstance(out, tuple)
                                                                      else out).detach()))
              for m in layers]
        try:
            model(ids)
        finally:
            for h in hs:
                h.remove()
        return got

    @torch.no_grad()
    def geosteer_recorder():
        rec = Recorder(["resid_post"], to_cpu=False)
        with steer(model, rec):
            model(ids)
        return [rec["resid_post", i][0] for i in range(len(layers))]

    sides = {"stock_forward": (stock, sdpa), "stock_forward_geosteer_attention": (stock, ours),
             "raw_hooks": (raw_hooks, sdpa), "geosteer_recorder": (geosteer_recorder, ours)}
    status = {}

    if "nnsight" not in skip:
        try:
            import nnsight
            from nnsight import LanguageModel

            # nnsight installs a per-module forward controller: give it its own copy of the model
            nn_base = copy.deepcopy(model)
            set_attention(nn_base, "sdpa")
            nn_model = LanguageModel(nn_base, tokenizer=tok)

            @torch.no_grad()
            def nnsight_trace():
                with nn_model.trace(ids):
                    saved = nnsight.save([])  # nnsight idiom: save the container, append raw values
                    for p in paths:
                        saved.append(envoy_at(nn_model, p).output)
                return [s[0] if isinstance(s, tuple) else s for s in saved]

            sides["nnsight"] = (nnsight_trace, lambda: None)
            status["nnsight"] = nnsight.__version__
        except Exception as e:  # noqa: BLE001 - report any failure of an optional peer
            status["nnsight"] = f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:120]}"

    if "transformer_lens" not in skip:
        try:
            from importlib.metadata import version

            from transformer_lens.model_bridge import TransformerBridge

            from geosteer.models.loading import BUNDLED, cached_folder

            src = str(cached_folder(args.model)) if args.model in BUNDLED else args.model
            tl_base = copy.deepcopy(model)  # the bridge wraps the model's modules: its own copy
            set_attention(tl_base, "sdpa")
            bridge = TransformerBridge.boot_transformers(src, hf_model=tl_base, tokenizer=tok)
            names = [f"blocks.{i}.hook_resid_post" for i in range(len(layers))]

            @torch.no_grad()
            def tl_cache():
                _, cache = bridge.run_with_cache(ids, names_filter=lambda n: n in names)
                return [cache[n] for n in names]

            sides["transformer_lens_bridge"] = (tl_cache, lambda: None)
            status["transformer_lens"] = version("transformer-lens")
        except Exception as e:  # noqa: BLE001
            status["transformer_lens"] = f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:120]}"

    sdpa()
    ref = raw_hooks()
    agree = {}
    for name, (fn, prep) in sides.items():
        if name.startswith("stock"):
            continue
        prep()
        got = fn()
        agree[name] = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, ref, strict=True))
    times = interleaved(sides, args.repeats)
    figs = ratios(times, "stock_forward")
    print(f"machine: {machine(args.threads)}")
    print(f"setup: model {args.model}, {ids.shape[1]} tokens, {len(layers)} layers, fp32, repeats "
          f"{args.repeats}, peers {json.dumps(status)}")
    for name, f in figs.items():
        extra = f", max|diff| vs raw hooks {agree[name]:.2e}" if name in agree else ""
        print(f"{name}: {f['ratio_median']:.3f}x stock (min {f['ratio_min']:.3f}, max {f['ratio_max']:.3f}), "
              f"median {f['median_s']:.3f} s{extra}")
    if args.out:
        from geosteer.io_utils import atomic_write_json

        atomic_write_json(args.out, {"machine": machine(args.threads), "peers": status, "agree": agree,
                                     "figures": figs, "args": vars(args)})


if __name__ == "__main__":
    main()
