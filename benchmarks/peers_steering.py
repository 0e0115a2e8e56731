"""A steering edit during 50-token greedy generation: add a vector to the residual stream after one layer.

geosteer ``AddVector`` vs a raw forward hook vs steering-vectors vs nnsight; ratios to stock generation
(no edit) measured in the same run. All edited sides must produce the same tokens (checked before
timing; printed). KV cache on, greedy, exactly ``--new-tokens`` tokens (no early stop).

    .venv/bin/python benchmarks/peers_steering.py --new-tokens 50 --repeats 5 --threads 2

Peers are optional (``pip install 'geosteer[bench]'``, steering-vectors with ``--no-deps``); a missing one
is reported and skipped.
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

PROMPT = "The history of the city begins in the Middle Ages, when"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--new-tokens", type=int, default=50)
    ap.add_argument("--layer", type=int, default=None, help="default: n_layers // 3")
    ap.add_argument("--scale", type=float, default=8.0, help="norm of the added vector")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma-separated peers to skip (nnsight,steering_vectors)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))

    from geosteer import load_model
    from geosteer.interventions import AddVector, steer
    from geosteer.models.anatomy import anatomy

    model, tok = load_model(args.model)
    an = anatomy(model)
    L = an.n_layers // 3 if args.layer is None else args.layer
    g = torch.Generator().manual_seed(args.seed)
    v = torch.randn(an.d_model, generator=g)
    v = v / v.norm() * args.scale
    enc = tok(PROMPT, return_tensors="pt")
    gen_kw = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                  pad_token_id=tok.pad_token_id)
    layer_mod = an.blocks[L].layer
    path = module_path(model, layer_mod)
    sdpa = lambda: set_attention(model, "sdpa")  # noqa: E731
    ours = lambda: set_attention(model, "geosteer")  # noqa: E731

    @torch.no_grad()
    def generate(m=model):
        return m.generate(**enc, **gen_kw)[0, enc.input_ids.shape[1]:].tolist()

    @torch.no_grad()
    def raw_hook():
        def hook(mod, a, out):
            if isinstance(out, tuple):
                return (out[0] + v, *out[1:])
            return out + v

        h = layer_mod.register_forward_hook(hook)
        try:
            return generate()
        finally:
            h.remove()

    @torch.no_grad()
    def geosteer_add():
        with steer(model, AddVector("resid_post", v, layers=[L])):
            return generate()

    sides = {"stock_generate": (generate, sdpa), "stock_generate_geosteer_attention": (generate, ours),
             "raw_hook": (raw_hook, sdpa), "geosteer_addvector": (geosteer_add, ours)}
    status = {}

    if "steering_vectors" not in skip:
        try:
            from importlib.metadata import version

            from steering_vectors import SteeringVector

            sv = SteeringVector(layer_activations={L: v}, layer_type="decoder_block")

            @torch.no_grad()
            def steering_vectors_apply():
                with sv.apply(model):
                    return generate()

            sides["steering_vectors"] = (steering_vectors_apply, sdpa)
            status["steering_vectors"] = version("steering-vectors")
        except Exception as e:  # noqa: BLE001 - report any failure of an optional peer
            status["steering_vectors"] = f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:120]}"

    if "nnsight" not in skip:
        try:
            import nnsight
            from nnsight import LanguageModel

            nn_base = copy.deepcopy(model)  # nnsight installs per-module controllers: its own copy
            set_attention(nn_base, "sdpa")
            nn_model = LanguageModel(nn_base, tokenizer=tok)

            @torch.no_grad()
            def nnsight_generate():
                with nn_model.generate(enc.input_ids, attention_mask=enc.attention_mask, **gen_kw) as tracer:
                    # one forward per new token (prefill + decode steps); a bounded loop lets the
                    # statement after it run (an open tracer.all() would end the block there)
                    for _ in tracer.iter[: args.new_tokens]:
                        envoy_at(nn_model, path).output[:] += v
                    out = tracer.result.save()
                return out[0, enc.input_ids.shape[1]:].tolist()

            sides["nnsight"] = (nnsight_generate, lambda: None)
            status["nnsight"] = nnsight.__version__
        except Exception as e:  # noqa: BLE001
            status["nnsight"] = f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:120]}"

    sdpa()
    stock_tokens = generate()
    ref = raw_hook()
    same = {}
    for name, (fn, prep) in list(sides.items()):
        if name.startswith("stock"):
            continue
        prep()
        try:
            same[name] = fn() == ref
        except Exception as e:  # noqa: BLE001
            status[name] = f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            sides.pop(name)
    times = interleaved(sides, args.repeats)
    figs = ratios(times, "stock_generate")
    print(f"machine: {machine(args.threads)}")
    print(f"setup: model {args.model}, prompt {enc.input_ids.shape[1]} tokens + {args.new_tokens} greedy, "
          f"vector |v|={args.scale} (seed {args.seed}) after layer {L}, fp32, repeats {args.repeats}, "
          f"peers {json.dumps(status)}")
    print(f"edit_changes_output: {ref != stock_tokens}")
    for name, f in figs.items():
        extra = f", same tokens as raw hook: {same[name]}" if name in same else ""
        print(f"{name}: {f['ratio_median']:.3f}x stock (min {f['ratio_min']:.3f}, max {f['ratio_max']:.3f}), "
              f"median {f['median_s']:.3f} s{extra}")
    if args.out:
        from geosteer.io_utils import atomic_write_json

        atomic_write_json(args.out, {"machine": machine(args.threads), "peers": status, "same_tokens": same,
                                     "edit_changes_output": ref != stock_tokens, "figures": figs,
                                     "args": vars(args)})


if __name__ == "__main__":
    main()
