"""The attention-manifold studies (paper §4–5) as functions with small, explicit budgets, plus a runner.

- :func:`output_comparison`: stock vs surfaces on a prompt set; greedy change rate and mean next-token KL
  per category (paper Table 6), with side-by-side texts.
- :func:`layer_sensitivity` / :func:`surface_norms`: which layer matters most (zeroing each layer's
  surfaces, next-token KL against the full bank) and the largest-norm surfaces (‖C_d‖_F).
- :func:`steering_study`: edits of the trained bank against the unedited bank (paper Table 2): layer-wide
  inversion, single-surface inversion, row-only (query-side) vs column-only (key-side) inversion, a
  layer-wide wall and a targeted wall, each both as the legacy grid-wall (C = -1, so 1 + S = 0 only inside
  the grid region; partition of unity) and as an exact wall (gain 0 for every pair, ``manifold.walls``).
- :func:`wall_study`: only the four walls on the wall prompts (unsafe vs safe), with each wall's leakage.
  Greedy change, first divergence, next-token KL, and paired-seed sampling (the same seed with and
  without the edit, T = 0.8, top-k 50).

Edits are applied to a copy of the bank's coefficients (the trained artifact is never modified).
Run ``python -m geosteer.manifold.studies --help``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence

import torch

from geosteer.eval.compare import first_divergence, kl_divergence, next_token_logprobs
from geosteer.eval.generation import generate, generate_seeds
from geosteer.eval.prompts import Prompt


def edited(bank, fn: Callable[[torch.Tensor], None]):
    """A copy of ``bank`` whose coefficients were changed in place by ``fn(coefficients)``."""
    new = copy.deepcopy(bank)
    new.clear_cache()
    with torch.no_grad():
        fn(new.coefficients)
    return new


# ------------------------------------------------------------------ edit recipes (on one layer slot)
def invert_layer(slot: int):
    return lambda c: c[slot].mul_(-1)


def invert_surfaces(slot: int, surfaces: Sequence[tuple[int, int]], rows=None, cols=None):
    """Invert (head, dim) surfaces of a slot; ``rows``/``cols`` (slices) restrict to part of the net."""
    rs = rows if rows is not None else slice(None)
    cs = cols if cols is not None else slice(None)

    def fn(c):
        for h, d in surfaces:
            c[slot, h, d, rs, cs] *= -1

    return fn


def invert_layer_part(slot: int, rows=None, cols=None):
    rs = rows if rows is not None else slice(None)
    cs = cols if cols is not None else slice(None)
    return lambda c: c[slot, :, :, rs, cs].mul_(-1)


def wall(slot: int, surfaces: Sequence[tuple[int, int]] | None = None):
    """C = -1 (so 1 + S = 0 where the basis sums to one, i.e. q and k inside the grid range)."""
    def fn(c):
        if surfaces is None:
            c[slot].fill_(-1.0)
        else:
            for h, d in surfaces:
                c[slot, h, d].fill_(-1.0)

    return fn


def exact_wall(bank, layer: int, surfaces: Sequence[tuple[int, int]] | None = None):
    """A copy of ``bank`` with an exact wall (gain 0 for every pair) on the layer or on (head, dim) pairs."""
    from geosteer.manifold.walls import Wall

    new = copy.deepcopy(bank)
    new.clear_cache()
    new.add_walls([Wall(layer=layer) if surfaces is None else Wall(layer=layer, pairs=tuple(surfaces))])
    return new


def _walls(bank, layer: int, top_sd):
    slot = bank.slot(layer)
    return [(f"grid-wall layer {layer}", edited(bank, wall(slot))),
            (f"grid-wall top-{len(top_sd)} surfaces of layer {layer}", edited(bank, wall(slot, top_sd))),
            (f"exact wall layer {layer}", exact_wall(bank, layer)),
            (f"exact wall top-{len(top_sd)} surfaces of layer {layer}", exact_wall(bank, layer, top_sd))]


def wall_study(model, tok, bank, wall_prompts: Sequence[Prompt], layer: int, *, top_walls: int = 10,
               max_new_tokens: int = 30, log: Callable[[str], None] | None = print) -> dict:
    """The paper's Table 3 walls (layer-wide and top-N norm) as legacy grid-walls and as exact walls, on
    ``wall_prompts`` (greedy change and next-token KL per unsafe/safe group) plus each wall's leakage (region
    attention mass that still passes value) on the same prompts."""
    from geosteer.manifold.coverage import legacy_walls, wall_leakage

    say = log or (lambda s: None)
    t0 = time.perf_counter()
    top = surface_norms(bank, top=max(top_walls, 1), layer=layer)
    top_sd = [(r["head"], r["dim"]) for r in top[:top_walls]]
    runner = PairedRunner(model, tok, [bank], wall_prompts, max_new_tokens, ())
    rows, leak = [], []
    texts = [p.text for p in wall_prompts]
    for name, b in _walls(bank, layer, top_sd):
        rows += runner.run(name, [b], sample=False)
        if name.startswith("grid-wall"):
            from geosteer.manifold.walls import Wall

            w = [Wall(layer=layer)] if "top" not in name else [Wall(layer=layer, pairs=tuple(top_sd))]
            lk = wall_leakage(model, tok, b, texts, walls=w)
        else:
            lk = wall_leakage(model, tok, b, texts)
        assert not legacy_walls(b)
        leak += [{"condition": name, **r} for r in lk]
        say(f"{name}: leakage {lk[0]['passing']:.4f} ({time.perf_counter() - t0:.0f} s)")
    return {"layer": layer, "top_surfaces": top, "rows": rows, "summary": summarize_conditions(rows),
            "leakage": leak, "wall_baseline": runner.baseline_rows(), "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------ measurements
def surface_norms(bank, top: int = 10, layer: int | None = None) -> list[dict]:
    """The ``top`` surfaces by Frobenius norm ‖C‖_F (optionally within one layer), largest first
    (:func:`geosteer.manifold.explore.top_surfaces`)."""
    from geosteer.manifold.explore import top_surfaces

    return top_surfaces(bank, top, layers=None if layer is None else [layer])


def layer_sensitivity(model, tok, bank, prompts: Sequence[str]) -> list[dict]:
    """Per layer: mean next-token KL(full bank ‖ bank with that layer zeroed) over ``prompts``."""
    full = [next_token_logprobs(model, tok, p, [bank]) for p in prompts]
    rows = []
    for slot, layer in enumerate(bank.layers):
        z = edited(bank, lambda c, s=slot: c[s].zero_())
        kls = [kl_divergence(f, next_token_logprobs(model, tok, p, [z])) for f, p in zip(full, prompts,
                                                                                           strict=True)]
        rows.append({"layer": layer, "mean_kl": sum(kls) / len(kls), "max_kl": max(kls),
                     "layer_norm": float(bank.coefficients[slot].detach().norm())})
    return rows


def output_comparison(model, tok, bank, prompts: Sequence[Prompt], max_new_tokens: int = 30,
                      log: Callable[[str], None] | None = None) -> tuple[list[dict], list[dict]]:
    """Stock vs ``bank`` per prompt; returns (rows, per-category summary incl. an 'all' row)."""
    rows = []
    for i, p in enumerate(prompts):
        lp_a = next_token_logprobs(model, tok, p.text, [])
        lp_b = next_token_logprobs(model, tok, p.text, [bank])
        ga = generate(model, tok, p.text, max_new_tokens)
        from geosteer.interventions import steer

        with steer(model, bank):
            gb = generate(model, tok, p.text, max_new_tokens)
        rows.append({"category": p.category, "prompt": p.text, "greedy_changed": ga.token_ids != gb.token_ids,
                     "first_divergence": first_divergence(ga.token_ids, gb.token_ids),
                     "kl": kl_divergence(lp_a, lp_b), "top1_stock": tok.decode([int(lp_a.argmax())]),
                     "top1_surfaces": tok.decode([int(lp_b.argmax())]), "text_stock": ga.text,
                     "text_surfaces": gb.text})
        if log and (i + 1) % 10 == 0:
            log(f"compare: {i + 1}/{len(prompts)}")
    return rows, summarize_by_category(rows)


def summarize_by_category(rows: list[dict]) -> list[dict]:
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["category"], []).append(r)
    out = []
    for cat, rs in list(groups.items()) + [("all", rows)]:
        out.append({"category": cat, "prompts": len(rs),
                    "greedy_change_rate": sum(r["greedy_changed"] for r in rs) / len(rs),
                    "mean_kl": sum(r["kl"] for r in rs) / len(rs)})
    return out


class PairedRunner:
    """Baseline (unedited bank) generations cached per prompt; each condition reuses them."""

    def __init__(self, model, tok, base: list, prompts: Sequence[Prompt], max_new_tokens: int = 30,
                 seeds: Sequence[int] = (), temperature: float = 0.8, top_k: int = 50) -> None:
        from geosteer.interventions import steer

        self.model, self.tok, self.prompts = model, tok, list(prompts)
        self.kw = dict(max_new_tokens=max_new_tokens)
        self.skw = dict(greedy=False, temperature=temperature, top_k=top_k)
        self.seeds = list(seeds)
        self.base = []
        for p in self.prompts:
            lp = next_token_logprobs(model, tok, p.text, base)
            with steer(model, *base):
                g = generate(model, tok, p.text, **self.kw)
                samples = generate_seeds(model, tok, p.text, self.seeds, temperature=temperature, top_k=top_k,
                                         **self.kw)
            self.base.append((lp, g, samples))

    def baseline_rows(self) -> list[dict]:
        rows = []
        for p, (_, g, samples) in zip(self.prompts, self.base, strict=True):
            row = {"prompt": p.text, "category": p.category, "text": g.text}
            if samples:
                row["unique_samples_first50"] = len({s.text[:50] for s in samples})
            rows.append(row)
        return rows

    def run(self, condition: str, interventions: list, sample: bool = True) -> list[dict]:
        from geosteer.interventions import steer

        rows = []
        for p, (lp_a, ga, sa) in zip(self.prompts, self.base, strict=True):
            lp_b = next_token_logprobs(self.model, self.tok, p.text, interventions)
            with steer(self.model, *interventions):
                gb = generate(self.model, self.tok, p.text, **self.kw)
                sb = (generate_seeds(self.model, self.tok, p.text, self.seeds, temperature=self.skw["temperature"],
                                     top_k=self.skw["top_k"], **self.kw) if sample else [])
            row = {"condition": condition, "category": p.category, "prompt": p.text,
                   "greedy_changed": ga.token_ids != gb.token_ids,
                   "first_divergence": first_divergence(ga.token_ids, gb.token_ids),
                   "kl": kl_divergence(lp_a, lp_b), "text_base": ga.text, "text_edited": gb.text}
            if sb:
                row["sampled_changed"] = sum(x.token_ids != y.token_ids for x, y in zip(sa, sb, strict=True))
                row["seeds"] = len(sb)
            rows.append(row)
        return rows


def summarize_conditions(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        key = (r["condition"], r["category"] if "wall" in r["condition"] else "all")
        groups.setdefault(key, []).append(r)
    out = []
    for (cond, cat), rs in groups.items():
        s = {"condition": cond, "prompts_group": cat, "prompts": len(rs),
             "greedy_changed": sum(r["greedy_changed"] for r in rs),
             "mean_kl": sum(r["kl"] for r in rs) / len(rs)}
        if "sampled_changed" in rs[0]:
            s["sampled_changed_frac"] = sum(r["sampled_changed"] for r in rs) / sum(r["seeds"] for r in rs)
            s["sampled_changed_min_max"] = [min(r["sampled_changed"] for r in rs),
                                            max(r["sampled_changed"] for r in rs)]
        out.append(s)
    return out


def steering_study(model, tok, bank, prompts: Sequence[Prompt], wall_prompts: Sequence[Prompt], *,
                   seeds: Sequence[int] = tuple(range(10)), max_new_tokens: int = 30, top_walls: int = 10,
                   layer: int | None = None, log: Callable[[str], None] | None = print) -> dict:
    """The paper's §5 experiments on ``bank`` (see module docstring). Returns tidy parts."""
    say = log or (lambda s: None)
    t0 = time.perf_counter()
    sens = layer_sensitivity(model, tok, bank, [p.text for p in prompts])
    if layer is None:
        layer = max(sens, key=lambda r: r["mean_kl"])["layer"]
    slot = bank.slot(layer)
    top = surface_norms(bank, top=max(top_walls, 1), layer=layer)
    h0, d0 = top[0]["head"], top[0]["dim"]
    K = bank.K
    mid = K // 2  # row/column 5 for K = 11 (basis centred at 0 on a symmetric range)
    say(f"most sensitive layer: {layer}; top surface there: head {h0} dim {d0} (norm {top[0]['norm']:.3f})")
    runner = PairedRunner(model, tok, [bank], prompts, max_new_tokens, seeds)
    conds: list[tuple[str, Callable, bool]] = [
        (f"invert layer {layer}", invert_layer(slot), True),
        (f"invert surface L{layer} h{h0} d{d0}", invert_surfaces(slot, [(h0, d0)]), True),
        (f"invert surface L{layer} h{h0} d{d0} rows {mid}-{K - 1}",
         invert_surfaces(slot, [(h0, d0)], rows=slice(mid, K)), False),
        (f"invert surface L{layer} h{h0} d{d0} rows 0-{mid - 1}",
         invert_surfaces(slot, [(h0, d0)], rows=slice(0, mid)), False),
        (f"invert surface L{layer} h{h0} d{d0} cols {mid}-{K - 1}",
         invert_surfaces(slot, [(h0, d0)], cols=slice(mid, K)), False),
        (f"invert layer {layer} rows {mid}-{K - 1}", invert_layer_part(slot, rows=slice(mid, K)), False),
        (f"invert layer {layer} cols {mid}-{K - 1}", invert_layer_part(slot, cols=slice(mid, K)), False),
    ]
    rows = []
    for name, fn, sample in conds:
        rows += runner.run(name, [edited(bank, fn)], sample=sample)
        say(f"{name}: {sum(r['greedy_changed'] for r in rows if r['condition'] == name)}/{len(prompts)} "
            f"greedy changed ({time.perf_counter() - t0:.0f} s)")
    wrunner = PairedRunner(model, tok, [bank], wall_prompts, max_new_tokens, ())
    top_sd = [(r["head"], r["dim"]) for r in top[:top_walls]]
    for name, b in _walls(bank, layer, top_sd):
        rows += wrunner.run(name, [b], sample=False)
        say(f"{name} done ({time.perf_counter() - t0:.0f} s)")
    return {"layer": layer, "sensitivity": sens, "top_surfaces": top, "rows": rows,
            "summary": summarize_conditions(rows), "baseline": runner.baseline_rows(),
            "wall_baseline": wrunner.baseline_rows(), "seconds": time.perf_counter() - t0}


def _main(argv: Sequence[str] | None = None) -> None:
    import argparse
    import shlex
    import sys
    from pathlib import Path

    from geosteer import load_model
    from geosteer.eval.prompts import load_prompts
    from geosteer.io_utils import atomic_write_csv, write_records
    from geosteer.manifold import load

    ap = argparse.ArgumentParser(prog="python -m geosteer.manifold.studies",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=["compare", "steer", "walls"])
    ap.add_argument("--surfaces", required=True, help="surfaces artifact folder")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", default=None, help="prompt set (default: manifold_ / steering_prompts)")
    ap.add_argument("--wall-prompts", default="wall_prompts")
    ap.add_argument("--limit", type=int, default=None, help="only the first N prompts (quick runs)")
    ap.add_argument("--max-new-tokens", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=10, help="paired sampling seeds 0..N-1 (steer)")
    ap.add_argument("--layer", type=int, default=None, help="edit this layer (default: most sensitive)")
    ap.add_argument("--top-walls", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", required=True, help="result JSON (a CSV summary is written beside it)")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    model, tok = load_model(a.model)
    bank = load(a.surfaces, model=model)
    out = Path(a.out)
    meta = {"command": "python -m geosteer.manifold.studies " + " ".join(shlex.quote(x) for x in
                                                                         (argv or sys.argv[1:])),
            "model": a.model, "surfaces": a.surfaces, "max_new_tokens": a.max_new_tokens, "greedy": True,
            "threads": torch.get_num_threads(), "torch": torch.__version__}
    log = lambda s: print(s, flush=True)  # noqa: E731
    if a.study == "compare":
        prompts = load_prompts(a.prompts or "manifold_prompts")[: a.limit]
        t0 = time.perf_counter()
        rows, summary = output_comparison(model, tok, bank, prompts, a.max_new_tokens, log=log)
        meta.update(prompt_set=a.prompts or "manifold_prompts", seconds=round(time.perf_counter() - t0, 1),
                    summary=summary, kl="KL(P_stock || P_surfaces) of the next token after the prompt, nats")
        write_records(out, rows, meta)
        atomic_write_csv(out.with_suffix(".summary.csv"), summary)
        for r in summary:
            log(f"{r['category']:>14}: {r['greedy_change_rate']:.2f} changed, mean KL {r['mean_kl']:.4f}")
    elif a.study == "walls":
        if a.layer is None:
            raise SystemExit("error: the walls study needs --layer (e.g. the steer study's most sensitive layer)")
        walls = load_prompts(a.wall_prompts)[: a.limit]
        res = wall_study(model, tok, bank, walls, a.layer, top_walls=a.top_walls, max_new_tokens=a.max_new_tokens,
                         log=log)
        meta.update(wall_prompt_set=a.wall_prompts, layer=a.layer, top_surfaces=res["top_surfaces"],
                    summary=res["summary"], leakage=res["leakage"], wall_baseline=res["wall_baseline"],
                    seconds=round(res["seconds"], 1),
                    kl="KL(P_unedited || P_edited) of the next token after the prompt, nats")
        write_records(out, res["rows"], meta)
        atomic_write_csv(out.with_suffix(".summary.csv"), res["summary"])
        for r in res["summary"] + res["leakage"]:
            log(str(r))
    else:
        prompts = load_prompts(a.prompts or "steering_prompts")[: a.limit]
        walls = load_prompts(a.wall_prompts)[: a.limit]
        res = steering_study(model, tok, bank, prompts, walls, seeds=tuple(range(a.seeds)),
                             max_new_tokens=a.max_new_tokens, top_walls=a.top_walls, layer=a.layer, log=log)
        meta.update(prompt_set=a.prompts or "steering_prompts", wall_prompt_set=a.wall_prompts,
                    seeds=list(range(a.seeds)), temperature=0.8, top_k=50, layer=res["layer"],
                    sensitivity=res["sensitivity"], top_surfaces=res["top_surfaces"], summary=res["summary"],
                    baseline=res["baseline"], wall_baseline=res["wall_baseline"],
                    seconds=round(res["seconds"], 1),
                    kl="KL(P_unedited || P_edited) of the next token after the prompt, nats")
        write_records(out, res["rows"], meta)
        atomic_write_csv(out.with_suffix(".summary.csv"), res["summary"])
        for r in res["summary"]:
            log(str(r))


if __name__ == "__main__":
    _main()
