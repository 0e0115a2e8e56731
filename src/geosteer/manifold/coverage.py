"""Grid coverage and wall leakage, measured on real attention.

:func:`grid_coverage`: the attention mass whose q_id or k_jd leaves the grid (separable form);
:func:`wall_leakage`: per wall region, the mass inside and the part still passing value (0 for exact walls);
:func:`heldout_windows`: held-out windows to measure on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from geosteer.attention import add_attention_handler, attention_weights, repeat_kv, use_geosteer_attention
from geosteer.data.corpus import split_text
from geosteer.eval.generation import prompt_ids
from geosteer.interventions import steer
from geosteer.io_utils import atomic_write_json
from geosteer.kernels.bspline import bspline_basis
from geosteer.manifold import read_config
from geosteer.manifold.edit import apply_edits
from geosteer.manifold.walls import Wall, blocked_mask, compile_layer
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import input_device

GAIN_EPS = 1e-6  # |gain| above this counts as passing value


def heldout_windows(tok, n: int = 4, length: int = 128, split: str = "heldout") -> list[torch.Tensor]:
    """``n`` consecutive windows of ``length`` tokens (1, length) from the start of the held-out split."""

    ids = tok(split_text(split, max_chars=length * n * 8), return_tensors="pt",
              add_special_tokens=False).input_ids[0]
    if ids.numel() < n * length:
        raise ValueError(f"the {split} split has only {ids.numel()} tokens (< {n} × {length})")
    return [ids[i * length:(i + 1) * length][None] for i in range(n)]


def _run(model, inputs: Sequence[torch.Tensor], handlers: dict, interventions: Sequence) -> None:

    use_geosteer_attention(model)
    an = anatomy(model)
    removers = [add_attention_handler(an.blocks[layer].attn, h) for layer, h in handlers.items()]
    try:
        dev = input_device(model)
        with torch.no_grad(), steer(model, *interventions):
            for ids in inputs:
                model(input_ids=ids.to(dev), use_cache=False)
    finally:
        for r in removers:
            r()


def _inputs(tok, texts_or_ids) -> list[torch.Tensor]:

    return [x if torch.is_tensor(x) else prompt_ids(tok, x) for x in texts_or_ids]


def grid_coverage(model, tok, bank, texts_or_ids: Sequence, layers: Sequence[int] | None = None,
                  with_bank: bool = True) -> list[dict]:
    """Rows per layer: ``outside`` (attention-mass fraction with q or k outside [lo, hi], all heads and
    dims), ``q_outside`` / ``k_outside`` (each side alone), ``worst_head`` / ``worst_head_outside`` and
    ``worst_dim_outside`` (the largest per-(head, dim) fraction), ``dims_mostly_outside`` (how many of the
    ``dims`` (head, dim) pairs have more than half their mass outside). ``with_bank``: measure with the bank
    attached (its operating point: earlier layers' surfaces move q, k) or on the stock model."""
    if not texts_or_ids:
        raise ValueError("no prompts or windows to measure coverage on")
    layers = list(bank.layers) if layers is None else [int(x) for x in layers]
    acc: dict[int, dict] = {}

    def make(layer):
        lo, hi = bank.range_of(layer)

        def handler(call, proceed):
            a = attention_weights(call).double()  # (b, H, L, T)
            q = call.query.double()
            k = repeat_kv(call.key, call.n_rep).double()
            in_q = ((q >= lo) & (q <= hi)).double()
            in_k = ((k >= lo) & (k <= hi)).double()
            ak = a @ in_k  # (b, H, L, d)
            rows = a.sum(-1, keepdim=True)  # (b, H, L, 1)
            s = acc.setdefault(layer, {"in": 0, "qin": 0, "kin": 0, "total": 0})
            s["in"] = s["in"] + (in_q * ak).sum((0, 2))
            s["qin"] = s["qin"] + (in_q * rows).sum((0, 2))
            s["kin"] = s["kin"] + ak.sum((0, 2))
            s["total"] = s["total"] + rows.sum((0, 2))  # (H, 1)
            return proceed(call)

        return handler

    _run(model, _inputs(tok, texts_or_ids), {x: make(x) for x in layers}, [bank] if with_bank else [])
    out = []
    for layer in layers:
        s = acc[layer]
        frac = 1 - s["in"] / s["total"]  # (H, d)
        h, d = divmod(int(frac.argmax()), frac.shape[1])
        lo, hi = bank.range_of(layer)
        out.append({"layer": layer, "lo": lo, "hi": hi, "outside": float(frac.mean()),
                    "q_outside": float((1 - s["qin"] / s["total"]).mean()),
                    "k_outside": float((1 - s["kin"] / s["total"]).mean()),
                    "worst_head": int((frac.mean(1)).argmax()), "worst_head_outside": float(frac.mean(1).max()),
                    "worst_dim_outside": float(frac.max()), "worst_dim": [h, d],
                    "dims_mostly_outside": int((frac > 0.5).sum()), "dims": int(frac.numel())})
    return out


def legacy_walls(bank) -> list[Wall]:
    """The legacy C = −1 walls recorded in ``bank.history`` (op ``grid-wall``, or a ``wall`` record of an
    artifact written before exact walls), each as a whole-plane region over its surfaces."""
    out: list[Wall] = []
    for rec in bank.history:
        op = rec.get("op")
        if not (op == "grid-wall" or (op == "wall" and "walls" not in rec)):
            continue
        if rec.get("selected"):
            by: dict[int, list] = {}
            for layer, h, d in rec["selected"]:
                by.setdefault(int(layer), []).append((int(h), int(d)))
            out += [Wall(layer=x, pairs=tuple(ps)) for x, ps in by.items()]
        else:
            heads = tuple(rec["heads"]) if rec.get("heads") is not None else None
            dims = tuple(rec["dims"]) if rec.get("dims") is not None else None
            out += [Wall(layer=int(x), heads=heads, dims=dims) for x in (rec.get("layers") or bank.layers)]
    return out


def wall_leakage(model, tok, bank, texts_or_ids: Sequence, walls: Sequence[Wall] | None = None) -> list[dict]:
    """Rows per wall: ``region_mass`` (Σ a_ij over pairs in the region, summed over its (head, dim) pairs,
    per query: divided by the number of queries × pairs), ``passing`` (Σ a_ij 1_R |g_ij| / Σ a_ij 1_R),
    ``passing_pairs`` (the region's attention mass with |g| > 1e-6, as a fraction). ``walls`` default: the
    bank's exact walls followed by its legacy grid-walls (``legacy_walls``)."""
    if not texts_or_ids:
        raise ValueError("no prompts or windows to measure leakage on")
    walls = (list(bank.walls) + legacy_walls(bank)) if walls is None else list(walls)
    if not walls:
        return []
    H, D = bank.n_heads, bank.head_dim
    acc = [{"mass": 0.0, "gain": 0.0, "pass": 0.0, "queries": 0} for _ in walls]

    def make(layer):
        mine = [(i, w) for i, w in enumerate(walls) if w.layer == layer]
        lw_bank = bank.walls_for(layer)
        bank_pairs = {} if lw_bank is None else {
            (int(h), int(d)): j for j, (h, d) in enumerate(zip(lw_bank.heads, lw_bank.dims, strict=True))}

        def handler(call, proceed):
            a = attention_weights(call).double()
            q = call.query.double()
            k = repeat_kv(call.key, call.n_rep).double()
            for i, w in mine:
                pairs = w.resolved_pairs(H, D)
                one = compile_layer([w], H, D)
                for p, (h, d) in enumerate(pairs):
                    qv, kv = q[:, h, :, d], k[:, h, :, d]
                    gain = torch.ones_like(a[:, h])
                    if layer in bank.layers:
                        s = bank.slot(layer)
                        lo, hi = bank.range_of(layer)
                        c = bank.coefficients[s, h, d].detach().double()
                        gain = gain + bspline_basis(qv, bank.grid_size, lo, hi) @ c @ \
                            bspline_basis(kv, bank.grid_size, lo, hi).transpose(-1, -2)
                    if (h, d) in bank_pairs:
                        j = bank_pairs[(h, d)]
                        gain = gain.masked_fill(blocked_mask(qv[:, None], kv[:, None],
                                                             lw_bank.regions[j:j + 1])[:, 0], 0.0)
                    inr = blocked_mask(qv[:, None], kv[:, None], one.regions[p:p + 1])[:, 0]
                    m = a[:, h] * inr
                    acc[i]["mass"] += float(m.sum())
                    acc[i]["gain"] += float((m * gain.abs()).sum())
                    acc[i]["pass"] += float((m * (gain.abs() > GAIN_EPS)).sum())
                acc[i]["queries"] += q.shape[0] * q.shape[2] * len(pairs)
            return proceed(call)

        return handler

    _run(model, _inputs(tok, texts_or_ids), {x: make(x) for x in sorted({w.layer for w in walls})}, [bank])
    rows = []
    for w, s in zip(walls, acc, strict=True):
        m = s["mass"]
        exact = w in bank.walls
        rows.append({"wall": w.describe() if exact else "grid-" + w.describe(), "exact": exact,
                     "region_mass": m / max(s["queries"], 1),
                     "passing": s["gain"] / m if m > 0 else math.nan,
                     "passing_pairs": s["pass"] / m if m > 0 else math.nan})
    return rows


def _main(argv: Sequence[str] | None = None) -> None:
    """``python -m geosteer.manifold.coverage``: coverage of an artifact, and the leakage of walls added by
    ``--edit`` (applied to a copy; e.g. ``--edit "grid-wall layer=10"``), on held-out windows, as JSON."""
    import argparse
    import shlex
    import sys

    from geosteer import load_model
    from geosteer.manifold import load

    ap = argparse.ArgumentParser(prog="python -m geosteer.manifold.coverage", description=_main.__doc__)
    ap.add_argument("--surfaces", required=True)
    ap.add_argument("--model", default=None, help="default: the artifact's base model")
    ap.add_argument("--windows", type=int, default=4, help="held-out windows of --length tokens")
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--edit", action="append", default=[], help="edit whose walls' leakage to measure (repeat)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)

    model, tok = load_model(a.model or read_config(a.surfaces).get("base_model"))
    bank = load(a.surfaces, model=model)
    wins = heldout_windows(tok, a.windows, a.length)
    res = {"command": "python -m geosteer.manifold.coverage " + " ".join(shlex.quote(x) for x in
                                                                         (argv or sys.argv[1:])),
           "windows": a.windows, "length": a.length, "coverage": grid_coverage(model, tok, bank, wins)}
    leak = []
    for e in a.edit:
        b = load(a.surfaces, model=model)
        apply_edits(b, [e])
        leak += [{"edit": e, **r} for r in wall_leakage(model, tok, b, wins)]
    res["wall_leakage"] = leak
    atomic_write_json(a.out, res)
    for r in res["coverage"] + leak:
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}, flush=True)


if __name__ == "__main__":
    _main()
