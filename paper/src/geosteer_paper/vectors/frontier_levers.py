"""The levers of the steering frontier, each at several strengths, as :class:`Point` s.

Every point's interventions come on top of (or, for the surfaces levers, instead of) the reference
surfaces, so each lever's strength 0 is the reference itself:

- ``CAA``: a mean-difference steering vector (``geosteer.vectors.extract``, last token, ``resid_post``) from
  the training prompts, added × ``direction`` · multiplier at one layer;
- ``learned steering surfaces``: every surface coefficient fine-tuned on the training prompts under a
  control-KL budget τ (``geosteer learn steering-surfaces`` for a promoted behaviour, ``geosteer learn walls
  --mode dense`` for a suppressed one), one point per τ;
- ``learned walls``: ``geosteer learn walls`` regions (they only suppress: the targets of a suppressed behaviour,
  the negatives of a promoted one), one point per τ;
- ``surfaces edits``: the N surfaces whose scaling moves the training objective most to first order
  (gradient · coefficients), each scaled by 1 ± t towards the behaviour (t = 1 zeroes, t = 2 inverts the
  ones that work against it);
- ``directional ∥/⊥``: component scaling (recipe keys ``scale_site``, ``scale_par``, ``scale_perp``);
- ``learned ∥/⊥ scales``: per-layer s∥/s⊥ at ``attn_out`` learned towards a promoted behaviour
  (``geosteer learn scales``; its KL budget is against the stock model), one point per τ;
- ``FFN edits``: the FFN branch gain and its radial / tangential variants (recipe keys of dynamics).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from geosteer.directional.steer_learn import ScaleLearnConfig, learn_scales
from geosteer.interventions import steer
from geosteer.manifold.edit import live
from geosteer.manifold.wall_learn import WallLearnConfig, encode_targets, target_logprob
from geosteer.manifold.wall_learn_train import learn_walls
from geosteer.recipe import load_recipe, parse_settings
from geosteer.vectors.extract import extract
from geosteer_paper.vectors.frontier import Behaviour


@dataclass
class Point:
    """One lever at one strength; ``context()`` yields the interventions to attach."""

    lever: str
    setting: str
    strength: float
    context: Callable[[], contextlib.AbstractContextManager[list]]
    layer: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in f"{self.lever}__{self.setting}")


def _fixed(ivs_fn: Callable[[], list]) -> Callable[[], contextlib.AbstractContextManager[list]]:
    @contextlib.contextmanager
    def ctx() -> Iterator[list]:
        yield ivs_fn()
    return ctx


def _caa_prompts(b: Behaviour) -> dict:
    if b.negatives_train:
        neg = {n["prompt"]: n["target"] for n in b.negatives_train}
        pairs = [[t["prompt"] + t["target"], t["prompt"] + neg[t["prompt"]]] for t in b.train if t["prompt"] in neg]
        if pairs:
            return {"pairs": pairs}
    return {"positive": [t["prompt"] + t["target"] for t in b.train], "negative": list(b.controls_train)}


def caa_points(model, tok, b: Behaviour, reference: list, layers: Sequence[int],
               multipliers: Sequence[float]) -> list[Point]:
    """CAA vectors (extracted with the reference attached) at each layer and multiplier."""

    with steer(model, *reference):
        sv = extract(model, tok, **_caa_prompts(b), layers=list(layers), point="resid_post",
                     method="mean_diff", positions="last")
    pts = []
    for layer in layers:
        for m in multipliers:
            v = sv.with_(scale=b.direction * float(m), layers=[layer])
            pts.append(Point("CAA", f"layer {layer} x{m:g}", float(m), _fixed(lambda v=v: [*reference, v]),
                             layer=layer, extra={"vector_norm": sv.norms()[layer]}))
    return pts


def _train_run(model, tok, b: Behaviour, surfaces: str, out: Path, mode: str, tau: float, steps: int,
               lr: float, log) -> Path:
    """Train (or resume, or reuse) one learned-walls / steering-surfaces run; the artifact folder."""
    from geosteer.manifold import load

    if (out / "geosteer_config.json").is_file():
        return out
    promote = mode == "dense" and b.direction > 0
    targets = b.train if (mode == "dense" or b.direction < 0) else b.negatives_train
    if not targets:
        raise ValueError(f"behaviour {b.name}: learned walls of a promoted behaviour need negatives")
    # BOS first, as the frontier's own measurements encode prompts (and as its reused runs were trained)
    cfg = WallLearnConfig(mode=mode, steps=steps, lr=lr, kl_threshold=tau, seed=0, add_bos=True,
                          sparsity=0.0 if mode == "dense" else 0.002)  # as learn steering-surfaces / walls
    bank = load(surfaces, model=model)
    out.parent.mkdir(parents=True, exist_ok=True)
    learn_walls(model, tok, bank, targets, list(b.controls_train), cfg, out, resume=True, promote=promote,
                negatives=b.negatives_train if promote else None, log=log)
    return out


def trained_points(model, tok, b: Behaviour, surfaces: str, runs: Path, mode: str, taus: Sequence[float],
                   steps: int, lr: float, reuse: dict | None = None, log=None) -> list[Point]:
    """One point per τ: the run's artifact (``reuse``: τ -> an existing artifact folder, used as is)."""
    from geosteer.manifold import load

    lever = "learned steering surfaces" if mode == "dense" else "learned walls"
    pts = []
    for tau in taus:
        def ctx_fn(tau=tau):
            folder = (reuse or {}).get(float(tau)) or _train_run(
                model, tok, b, surfaces, runs / f"{b.name}-{mode}-tau{tau:g}", mode, tau, steps, lr, log)
            return [load(folder, model=model)]
        what = "suppress negatives, " if mode == "walls" and b.direction > 0 else ""
        pts.append(Point(lever, f"{what}tau {tau:g}, {steps} steps", float(tau), _fixed(ctx_fn),
                         extra={"steps": steps, "lr": lr, "kl_threshold": float(tau),
                                "reused": str((reuse or {}).get(float(tau)) or "")}))
    return pts


def scales_points(model, tok, b: Behaviour, reference: list, runs: Path, taus: Sequence[float], steps: int,
                  lr: float, log=None) -> list[Point]:
    """Learned per-layer s∥/s⊥ at ``attn_out`` (``geosteer learn scales``: promote objective, control
    KL against the stock model), one run per τ, applied on top of the reference."""

    pts = []
    for tau in taus:
        def ctx_fn(tau=tau):
            out = runs / f"{b.name}-scales-tau{tau:g}"
            if not (out / "geosteer_config.json").is_file():
                out.parent.mkdir(parents=True, exist_ok=True)
                learn_scales(model, tok, b.train, list(b.controls_train),
                             ScaleLearnConfig(site="attn_out", steps=steps, lr=lr, kl_threshold=tau), out,
                             negatives=b.negatives_train, resume=True, log=log)
            spec, _ = load_recipe(out)
            return [*reference, *spec.build(model)]
        pts.append(Point("learned ∥/⊥ scales", f"attn_out all layers, tau {tau:g}, {steps} steps", float(tau),
                         _fixed(ctx_fn), extra={"steps": steps, "lr": lr, "kl_threshold": float(tau)}))
    return pts


def surface_relevance(model, tok, b: Behaviour, bank) -> torch.Tensor:
    """(slots, heads, dims): first-order change of the training objective (direction × mean target
    log-prob, minus the negatives' for a promoted behaviour) when one surface is scaled by 1 + ε."""

    tb = encode_targets(tok, b.train)
    nb = encode_targets(tok, b.negatives_train) if b.negatives_train and b.direction > 0 else None
    was = bank.coefficients.requires_grad
    bank.coefficients.requires_grad_(True)
    try:
        with steer(model, bank), torch.enable_grad():
            obj = b.direction * target_logprob(model(input_ids=tb.ids, use_cache=False).logits, tb).mean()
            if nb is not None:
                obj = obj - target_logprob(model(input_ids=nb.ids, use_cache=False).logits, nb).mean()
            (grad,) = torch.autograd.grad(obj, bank.coefficients)
    finally:
        bank.coefficients.requires_grad_(was)
    return (grad * bank.coefficients.detach()).flatten(-2).sum(-1)


def edit_points(model, tok, b: Behaviour, bank, top: int, strengths: Sequence[float]) -> list[Point]:
    """Scale the ``top`` most relevant surfaces by 1 + t·sign(relevance) (``manifold.live`` edits)."""

    rel = surface_relevance(model, tok, b, bank)
    idx = torch.topk(rel.abs().flatten(), min(top, rel.numel())).indices
    L, H, D = rel.shape
    chosen = [(int(i) // (H * D), (int(i) // D) % H, int(i) % D) for i in idx]
    pts = []
    for t in strengths:
        edits = [f"scale={1 + t * (1 if rel[s, h, d] > 0 else -1):g} layer={bank.layers[s]} head={h} dim={d}"
                 for s, h, d in chosen]

        @contextlib.contextmanager
        def ctx(edits=edits):
            with live(bank, *edits):
                yield [bank]
        pts.append(Point("surfaces edits", f"top {top}, t={t:g}", float(t), ctx,
                         extra={"edits": edits[:4] + (["..."] if len(edits) > 4 else [])}))
    return pts


def recipe_points(model, reference: list, lever: str, settings: Sequence[tuple[str, float, list[str]]],
                  layer: int | None = None) -> list[Point]:
    """Points built by the recipe front door: ``(label, strength, ["key=value", ...])``."""

    pts = []
    for label, strength, kv in settings:
        spec = parse_settings(kv)
        pts.append(Point(lever, label, float(strength),
                         _fixed(lambda spec=spec: [*reference, *spec.build(model)]), layer=layer,
                         extra={"recipe": list(kv)}))
    return pts


def directional_settings(layer: int, par: Sequence[float], perp: Sequence[float],
                         sites: Sequence[str] = ("attn_out", "mlp_out")) -> list[tuple[str, float, list[str]]]:
    """s∥ values (s⊥ = 1) and s⊥ values (s∥ = 1) at each site on one layer."""
    out = []
    for site in sites:
        out += [(f"{site} layer {layer} s_par={s:g}", s, [f"scale_site={site}", f"scale_par={s}",
                                                          f"scale_layers={layer}"]) for s in par]
        out += [(f"{site} layer {layer} s_perp={s:g}", s, [f"scale_site={site}", f"scale_perp={s}",
                                                           f"scale_layers={layer}"]) for s in perp]
    return out


def ffn_settings(layer: int, gains: Sequence[float],
                 variants: Sequence[str] = ("radial", "tangential")) -> list[tuple[str, float, list[str]]]:
    """FFN branch gains α and FFN variants on one layer."""
    out = [(f"layer {layer} alpha_mlp={a:g}", a, [f"alpha_mlp={a}", f"gain_layers={layer}"]) for a in gains]
    out += [(f"layer {layer} {v}", 1.0, [f"mlp_variant={v}", f"mlp_layers={layer}"]) for v in variants]
    return out
