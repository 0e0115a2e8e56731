"""Per-layer residual-dynamics diagnostics in one forward pass (paper §4 and App. C.6), over real tokens.

``du_norm`` ‖P_u(u^{ℓ+1} − u^ℓ)‖ (Eq. 18); ``cos_attn``, ``cos_full``, ``cos_gap``, ``deficit`` = 1 − cos_attn
(Fig. 2); ``ffn_tangential_frac`` ‖P_v Φ‖/‖Φ‖ (Eq. 19); ``defect`` C_ℓ = ‖Φ(x + A) − Φ(x)‖/(‖Φ(x)‖ + ε)
(Eq. 22; 0 on parallel blocks); ``commutator`` the DΦ·A half of [A, Φ] (Eq. 14), scale-free; ``norm``,
``norm_cv``, ``norm_cv_bulk``; per sequence the diversity D = 1 − ‖E u‖² (Eq. 20) before, after attention
and after the FFN, and its changes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.dynamics import sphere
from geosteer.eval.windows import corpus_windows  # noqa: F401 - re-exported (moved to eval.windows)
from geosteer.hooks import HookSet, add_hook
from geosteer.interventions import steer
from geosteer.models.anatomy import BlockView, anatomy
from geosteer.models.limits import check_positions
from geosteer.models.loading import input_device

TOKEN_METRICS = ("du_norm", "cos_attn", "cos_full", "cos_gap", "deficit", "ffn_tangential_frac", "defect",
                 "commutator", "norm")
SEQ_METRICS = ("div_pre", "div_attn", "div_post", "ddiv_attn", "ddiv_ffn")


def ffn_field(block: BlockView, z: torch.Tensor) -> torch.Tensor:
    """Φ(z): the block's FFN branch (norm → MLP → post-norm if any) as a residual update, without hooks."""
    y = block.mlp.forward(block.mlp_norm.forward(z))
    y = y[0] if isinstance(y, (tuple, list)) else y
    if block.mlp_update is not block.mlp:
        y = block.mlp_update.forward(y)
    return y


class _Stats:
    """Running sums per (layer, metric): count, Σv, Σv² in float64."""

    def __init__(self) -> None:
        self.s: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])

    def add(self, layer: int, metric: str, values: torch.Tensor) -> None:
        v = values.detach().double().reshape(-1)
        v = v[torch.isfinite(v)]
        acc = self.s[(layer, metric)]
        acc[0] += v.numel()
        acc[1] += v.sum().item()
        acc[2] += (v * v).sum().item()

    def summary(self, layer: int, metric: str) -> tuple[float, float, int]:
        n, s, ss = self.s[(layer, metric)]
        if n == 0:
            return math.nan, math.nan, 0
        mean = s / n
        var = max(0.0, ss / n - mean * mean) * (n / (n - 1) if n > 1 else 0.0)
        return mean, math.sqrt(var), int(n)


class DiagnosticsCollector:
    """Read-only intervention that accumulates the diagnostics above; ``rows()`` gives tidy records.

    Set ``collector.mask`` ((batch, seq) bool, True = real token) before a forward on a padded batch.
    """

    def __init__(self, layers: Sequence[int] | None = None, eps: float = 1e-6) -> None:
        self.layers = layers
        self.eps = eps
        self.mask: torch.Tensor | None = None
        self.stats = _Stats()
        self._layers: list[int] = []

    def attach(self, model: nn.Module) -> Callable[[], None]:
        an = anatomy(model)
        self._layers = an.check_layers(self.layers)
        hooks = HookSet()
        for layer in self._layers:
            block = an.blocks[layer]
            local: dict[str, torch.Tensor] = {}

            def on_mlp_in(x, ctx, block=block, local=local):
                if not an.parallel_residual:
                    local["phi_x"] = ffn_field(block, ctx.state["resid_pre"])
                return None

            def on_mlp_out(y, ctx, local=local):
                local["phi"] = y
                return None

            def on_post(xp, ctx, local=local):
                self._measure(ctx.layer, ctx.state, local, xp)
                local.clear()
                return None

            add_hook(model, "mlp_in", layer, on_mlp_in, hooks)
            add_hook(model, "mlp_out", layer, on_mlp_out, hooks)
            add_hook(model, "resid_post", layer, on_post, hooks)
        return hooks.remove

    @torch.no_grad()
    def _measure(self, layer: int, state: dict, local: dict, x_post: torch.Tensor) -> None:
        x, a, m, phi = state["resid_pre"], state["attn_out"], state["mlp_in"], local["phi"]
        x, a, m, phi, x_post = (t.float() for t in (x, a, m, phi, x_post))
        phi_x = local["phi_x"].float() if "phi_x" in local else phi  # parallel block: Φ already reads x
        mask = self.mask
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        mask = mask.to(x.device)
        eps = self.eps
        u = sphere.unit(x)
        du = sphere.tangential(u, sphere.unit(x_post))  # Δu = P_u(u' − u) = P_u u'
        cos_attn = sphere.cosine(sphere.tangential(u, a), du)
        cos_full = sphere.cosine(sphere.tangential(u, a + phi), du)
        v = sphere.unit(m)
        tan_frac = sphere.tangential(v, phi).norm(dim=-1) / phi.norm(dim=-1).clamp_min(sphere.EPS)
        diff = (phi - phi_x).norm(dim=-1)
        phi_x_norm = phi_x.norm(dim=-1)
        x_norm = x.norm(dim=-1)
        per_token = {
            "du_norm": du.norm(dim=-1),
            "cos_attn": cos_attn,
            "cos_full": cos_full,
            "cos_gap": cos_full - cos_attn,
            "deficit": 1.0 - cos_attn,
            "ffn_tangential_frac": tan_frac,
            "defect": diff / (phi_x_norm + eps),
            "commutator": diff * x_norm / (a.norm(dim=-1) * phi_x_norm + eps),
            "norm": x_norm,
        }
        for name, val in per_token.items():
            self.stats.add(layer, name, val[mask])
        bulk = mask.clone()
        bulk[:, 0] = False
        self.stats.add(layer, "norm_bulk", x_norm[bulk])
        real = mask.any(dim=1)
        d_pre = sphere.diversity(u, mask)
        d_attn = sphere.diversity(sphere.unit(x + a), mask)
        d_post = sphere.diversity(sphere.unit(x_post), mask)
        for name, val in (("div_pre", d_pre), ("div_attn", d_attn), ("div_post", d_post),
                          ("ddiv_attn", d_attn - d_pre), ("ddiv_ffn", d_post - d_attn)):
            self.stats.add(layer, name, val[real])

    def rows(self) -> list[dict]:
        """Tidy long records: one per (layer, metric) with mean, std (over tokens/sequences) and n."""
        out = []
        for layer in self._layers:
            for metric in TOKEN_METRICS + SEQ_METRICS:
                mean, std, n = self.stats.summary(layer, metric)
                out.append({"layer": layer, "metric": metric, "mean": mean, "std": std, "n": n})
            for src, name in (("norm", "norm_cv"), ("norm_bulk", "norm_cv_bulk")):
                mean, std, n = self.stats.summary(layer, src)
                out.append({"layer": layer, "metric": name, "mean": std / mean if n > 1 else math.nan,
                            "std": math.nan, "n": n})
        return out


def wide(rows: list[dict], value: str = "mean") -> list[dict]:
    """Pivot long records to one row per layer (``metric`` columns), for tables and plots."""
    by_layer: dict[int, dict] = {}
    for r in rows:
        by_layer.setdefault(r["layer"], {"layer": r["layer"]})[r["metric"]] = r[value]
    return [by_layer[k] for k in sorted(by_layer)]


def metric(rows: list[dict], name: str) -> list[float]:
    """The per-layer means of one metric, in layer order."""
    return [r["mean"] for r in sorted(rows, key=lambda r: r["layer"]) if r["metric"] == name]


@torch.no_grad()
def diagnose(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
             batch_size: int = 4, layers: Sequence[int] | None = None, eps: float = 1e-6,
             interventions: Sequence = ()) -> list[dict]:
    """Run the diagnostics over ``input_ids`` (n, seq) in batches; one forward per batch.

    ``attention_mask`` (n, seq) marks real tokens (padding is masked out of every statistic).
    ``interventions`` stay active during the pass (diagnostics of a modified model).
    """
    check_positions(model, input_ids.shape[-1], "window length")

    if input_ids.dim() != 2 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids must be (n, seq) with seq >= 1, got shape {tuple(input_ids.shape)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
    col = DiagnosticsCollector(layers=layers, eps=eps)
    device = input_device(model)
    with steer(model, *interventions, col):
        for i in range(0, input_ids.shape[0], batch_size):
            ids = input_ids[i : i + batch_size].to(device)
            am = None if attention_mask is None else attention_mask[i : i + batch_size].to(device)
            col.mask = None if am is None else am.bool()
            model(input_ids=ids, attention_mask=am, use_cache=False)
    return col.rows()


