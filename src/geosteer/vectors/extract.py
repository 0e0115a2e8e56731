"""Extract one steering direction per layer from contrastive prompts (CAA / DiffMean, PCA, probe).

Prompts are encoded as ``tok(prompt)``, right-padded, read at a hook point and reduced by ``positions``;
the aggregators are steering-vectors' and repeng's definitions, tested against those packages.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from geosteer.errors import GeosteerError
from geosteer.hooks import attach_hooks
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy, parse_layers
from geosteer.models.loading import input_device, model_id
from geosteer.vectors.apply import SteeringVectors
from geosteer.vectors.config import PAIRED_METHODS, ExtractConfig, parse_positions


def encode(tok, prompts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
    """Token ids of each prompt, as ``tok(prompt)`` gives them; an empty encoding is refused."""
    out = []
    for i, p in enumerate(prompts):
        ids = list(tok(p, add_special_tokens=add_special_tokens)["input_ids"])
        if not ids:
            raise GeosteerError(f"prompt {i} ({p!r}) encodes to no tokens")
        out.append(ids)
    return out


def _span(length: int, positions: int | str, i: int) -> slice:
    if positions == "all":
        return slice(0, length)
    start = positions if positions >= 0 else length + positions
    if not 0 <= start < length:
        raise GeosteerError(f"positions {positions}: prompt {i} has only {length} tokens")
    return slice(start, length)


@torch.no_grad()
def collect_activations(model: nn.Module, tok, prompts: Sequence[str], layers: Sequence[int], point: str,
                        positions: int | str = -1, *, add_special_tokens: bool = True,
                        batch_size: int = 8) -> dict[int, torch.Tensor]:
    """layer → (n_prompts, d_model) float32 CPU tensor: each prompt's activation at ``point``, averaged over
    its ``positions`` (``"last"``/``-1``: the last token; ``"all"``; ``k``: tokens k..end)."""

    positions = parse_positions(positions)
    encoded = encode(tok, prompts, add_special_tokens)
    spans = [_span(len(ids), positions, i) for i, ids in enumerate(encoded)]
    device = input_device(model)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    rows: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    seen: dict[int, torch.Tensor] = {}

    def record(x, ctx):
        seen[ctx.layer] = x.detach()

    class _Record:
        def attach(self, m):
            return attach_hooks(m, point, list(layers), record)

    for b0 in range(0, len(encoded), batch_size):
        batch = encoded[b0:b0 + batch_size]
        width = max(len(ids) for ids in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, row in enumerate(batch):
            ids[r, :len(row)] = torch.tensor(row)
            mask[r, :len(row)] = 1
        kwargs = {} if bool(mask.all()) else {"attention_mask": mask.to(device)}
        seen.clear()
        with steer(model, _Record()):
            model(input_ids=ids.to(device), **kwargs)
        for layer in layers:
            x = seen[layer]
            for r in range(len(batch)):
                rows[layer].append(x[r, spans[b0 + r]].float().mean(0).cpu())
    return {layer: torch.stack(v) for layer, v in rows.items()}


# -- aggregators: (positive (n, d), negative (m, d)) -> direction (d,) ------------------------------------
def mean_diff(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """CAA / DiffMean: mean(positive) − mean(negative) (= the mean of the pair differences for pairs)."""
    return pos.double().mean(0) - neg.double().mean(0)


def _top_direction(data: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svd(data.double(), full_matrices=False).Vh[0]


def pca(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """steering-vectors' PCA: the top right singular vector of the (uncentered) pair differences, signed so
    that the differences project positively on average; unit norm."""
    deltas = pos.double() - neg.double()
    vec = _top_direction(deltas)
    return -vec if float((deltas @ vec).mean()) < 0 else vec


def pca_diff(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """repeng's ``pca_diff``: the first principal component of the centered pair differences, signed so
    that most positives project above their negatives (on a tie, as scikit-learn's PCA signs it: the
    largest entry positive); unit norm."""
    deltas = pos.double() - neg.double()
    vec = _top_direction(deltas - deltas.mean(0))
    vec = -vec if float(vec[vec.abs().argmax()]) < 0 else vec
    proj = deltas @ vec
    return -vec if int((proj < 0).sum()) > int((proj > 0).sum()) else vec


def probe(pos: torch.Tensor, neg: torch.Tensor, c: float = 1.0, paired: bool = True) -> torch.Tensor:
    """steering-vectors' logistic probe: L2-regularised logistic regression (sklearn's objective,
    ``0.5‖w‖² + C Σ log(1 + exp(−y w·x))``, no intercept) of +1 (positive) vs −1 (negative) on activations
    centered by each pair's mean (by the midpoint of the two means for unpaired sets); unit norm. Solved to
    convergence with L-BFGS in float64."""
    pos, neg = pos.double(), neg.double()
    center = (pos + neg) / 2 if paired else (pos.mean(0) + neg.mean(0)) / 2
    x = torch.cat([pos - center, neg - center])
    y = torch.cat([torch.ones(len(pos)), -torch.ones(len(neg))]).double()
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], lr=1, max_iter=2000, tolerance_grad=1e-12, tolerance_change=1e-15,
                            history_size=50, line_search_fn="strong_wolfe")

    def loss():
        opt.zero_grad()
        value = 0.5 * (w @ w) + c * nn.functional.softplus(-y * (x @ w)).sum()
        value.backward()
        return value

    with torch.enable_grad():
        opt.step(loss)
    w = w.detach()
    norm = w.norm()
    return w / norm if norm > 0 else w


AGGREGATORS = {"mean_diff": mean_diff, "pca": pca, "pca_diff": pca_diff, "probe": probe}


def _check_prompts(pairs, positive, negative) -> tuple[list[str], list[str], bool]:
    if pairs is not None:
        if positive is not None or negative is not None:
            raise GeosteerError("give either pairs or positive= and negative= prompt sets, not both")
        if not isinstance(pairs, (list, tuple)) or not pairs:
            raise GeosteerError("pairs must be a non-empty list of [positive, negative] prompt pairs")
        for i, p in enumerate(pairs):
            if not (isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(s, str) for s in p)):
                raise GeosteerError(f"pair {i} must be [positive, negative] (two strings), got {p!r:.80}")
        if all(p[0] == p[1] for p in pairs):
            raise GeosteerError("every pair's positive and negative prompts are the same text: their difference "
                                "(the steering vector) would be zero; each pair must contrast two prompts")
        return [p[0] for p in pairs], [p[1] for p in pairs], True
    for name, s in (("positive", positive), ("negative", negative)):
        if not isinstance(s, (list, tuple)) or not s or not all(isinstance(t, str) for t in s):
            raise GeosteerError(f"{name}= must be a non-empty list of prompts (or give pairs)")
    return list(positive), list(negative), False


def extract(model: nn.Module, tok, pairs: Sequence[Sequence[str]] | None = None, *,
            positive: Sequence[str] | None = None, negative: Sequence[str] | None = None,
            layers: str | Sequence[int] | None = None, config: ExtractConfig | None = None, **settings):
    """Steering vectors from ``pairs`` ([positive, negative] prompts) or two prompt sets, one per layer
    (``layers``: a spec such as ``"3-5"`` or a list; None: all). ``config`` / ``settings``: the fields of
    :class:`ExtractConfig` (``point``, ``method``, ``positions``, ...). Returns :class:`SteeringVectors`."""

    cfg = config or ExtractConfig(**settings)
    if config is not None and settings:
        cfg = ExtractConfig(**{**config.to_dict(), **settings})
    pos_prompts, neg_prompts, paired = _check_prompts(pairs, positive, negative)
    if cfg.method in PAIRED_METHODS and not paired:
        raise GeosteerError(f"method {cfg.method} needs [positive, negative] pairs, not two prompt sets")
    an = anatomy(model)
    chosen = an.check_layers(parse_layers(layers, an.n_layers))
    kw = {"add_special_tokens": cfg.add_special_tokens, "batch_size": int(cfg.batch_size)}
    pos_acts = collect_activations(model, tok, pos_prompts, chosen, cfg.point, cfg.positions, **kw)
    neg_acts = collect_activations(model, tok, neg_prompts, chosen, cfg.point, cfg.positions, **kw)
    agg = AGGREGATORS[cfg.method]
    vectors = {}
    for layer in chosen:
        args = (pos_acts[layer], neg_acts[layer])
        vec = agg(*args, paired=paired) if cfg.method == "probe" else agg(*args)
        vectors[layer] = vec.float()
        if not bool(vectors[layer].any()):
            raise GeosteerError(f"the steering vector of layer {layer} is zero: the positive and negative prompts "
                                f"give the same activations at {cfg.point}; use prompts that differ in the behaviour")
    return SteeringVectors(vectors, point=cfg.point, base_model=model_id(model),
                           model_type=str(getattr(model.config, "model_type", "")), d_model=an.d_model,
                           n_layers=an.n_layers, extraction={**cfg.to_dict(), "n_positive": len(pos_prompts),
                                                             "n_negative": len(neg_prompts), "paired": paired})
