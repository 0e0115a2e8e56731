"""Learned scalar FFN gates α_ℓ (paper §4, Eq. (23); App. C.1, Table 4): x_{ℓ+1} = y_ℓ + α_ℓ Φ_ℓ(y_ℓ).

Trained with :func:`geosteer.train.train`, saved as ``gates.safetensors``; gates of one are the stock logits exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from geosteer.artifacts import CONFIG_NAME, ArtifactFormat, check_base_model, load_state, render_model_card, write_state
from geosteer.dynamics.config import GateConfig
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.hooks import attach_hooks
from geosteer.methods import push_artifact
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import model_id
from geosteer.served import Form
from geosteer.train import train

WEIGHTS_NAME = "gates.safetensors"
FORMAT = "geosteer-gates"
VERSION = 1


class FFNGates(nn.Module):
    """One trainable scalar per gated layer, multiplying that layer's FFN residual update (``mlp_out``)."""

    def __init__(self, n_layers: int, layers: Sequence[int] | None = None, init: float = 1.0,
                 base_model: str | None = None) -> None:
        super().__init__()
        self.n_layers = int(n_layers)
        chosen = list(range(self.n_layers)) if layers is None else [int(i) for i in layers]
        bad = [i for i in chosen if not 0 <= i < self.n_layers]
        if bad:
            raise ValueError(f"layer {bad[0]} out of range: this model has layers 0..{self.n_layers - 1}")
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"gated layers must be distinct, got {chosen}")
        self.layers = chosen
        self.base_model = base_model
        self.alpha = nn.Parameter(torch.full((len(chosen),), float(init)))
        self.extra: dict = {}  # the training record a save puts into the config

    @classmethod
    def for_model(cls, model: nn.Module, layers: Sequence[int] | None = None, init: float = 1.0) -> FFNGates:

        an = anatomy(model)
        return cls(an.n_layers, an.check_layers(layers), init, base_model=model_id(model))

    def attach(self, model: nn.Module) -> Callable[[], None]:
        an = anatomy(model)
        if an.n_layers != self.n_layers:
            raise ArtifactError(f"gates were made for {self.n_layers} layers; this model has {an.n_layers}")
        index = {layer: i for i, layer in enumerate(self.layers)}

        def fn(phi, ctx):
            return phi * self.alpha[index[ctx.layer]].to(device=phi.device, dtype=phi.dtype)

        return attach_hooks(model, "mlp_out", self.layers, fn)

    def served_ops(self, ops) -> None:
        """Φ times its layer's gate on each served layer (``geosteer.served``)."""
        alpha = self.alpha.detach().float().clone()
        for i, layer in enumerate(self.layers):
            ops.edit(layer, "mlp_out", lambda t, st, tokens, a=alpha[i]: t * a.to(device=t.device, dtype=t.dtype),
                     Form(float(alpha[i]), float(alpha[i])))

    def at_strength(self, s: float) -> FFNGates:
        """A copy at strength ``s``: each gate α ← 1 + s·(α − 1), the learned change × s (0: gates of one,
        the stock model; 1: these gates, returned as they are). Non-finite gates are refused."""
        s = float(s)
        if s == 1.0:
            return self
        out = FFNGates(self.n_layers, self.layers, base_model=self.base_model)
        out.extra = dict(self.extra)
        with torch.no_grad():
            out.alpha.copy_(1.0 + s * (self.alpha.detach().float() - 1.0))
        if not bool(torch.isfinite(out.alpha).all()):
            raise GeosteerError(f"gates_strength={s:g}: the gates 1 + s·(α − 1) overflow float32")
        return out.to(self.alpha.device)

    def table(self) -> list[dict]:
        alpha = self.alpha.detach()
        return [{"layer": layer, "alpha": float(a)} for layer, a in zip(self.layers, alpha, strict=True)]

    def summary(self) -> dict:
        a = self.alpha.detach()
        return {"mean": float(a.mean()), "min": float(a.min()), "max": float(a.max()), "n": a.numel()}

    def config(self) -> dict:
        cfg = GateConfig(layers=self.layers, init=1.0)
        return {**GATES.header(), **cfg.to_dict(), "n_layers": self.n_layers, "base_model": self.base_model}

    # -- the artifact state (geosteer.artifacts.state) -------------------------------------------------------
    def to_state(self) -> tuple[dict, dict]:
        """``(config, tensors)``: the gated layers, their count, the base model; ``alpha``."""
        if not self.base_model:
            raise ArtifactError("these gates record no base model; make them with FFNGates.for_model(model) "
                                "or pass base_model=")
        cfg = {**GateConfig(layers=self.layers, init=1.0).to_dict(), "n_layers": self.n_layers,
               "base_model": self.base_model}
        if self.extra:
            cfg["extra"] = self.extra
        return cfg, {"alpha": self.alpha.detach().float()}

    @classmethod
    def from_state(cls, config: dict, tensors: dict, model: nn.Module | None = None, *, force: bool = False,
                   source: str = "gates") -> FFNGates:
        """The gates of a checked config and its tensors; with ``model``: layer count and base model checked."""
        alpha = tensors.get("alpha")
        if alpha is None or set(tensors) != {"alpha"} or not alpha.is_floating_point() \
                or alpha.shape != (len(config["layers"]),):
            raise ArtifactError(f"{source}: expected one float tensor 'alpha' of shape ({len(config['layers'])},), "
                                f"one gate per layer (got {', '.join(sorted(tensors))})")
        if not bool(torch.isfinite(alpha).all()):
            raise ArtifactError(f"{source}: the gates hold NaN or infinite values")
        gates = cls(config["n_layers"], config["layers"], base_model=config["base_model"])
        gates.extra = dict(config.get("extra") or {})
        with torch.no_grad():
            gates.alpha.copy_(alpha)
        if model is not None:
            from geosteer.models.loading import model_id
            from geosteer.overflow import check_forward_finite

            an = anatomy(model)
            if an.n_layers != gates.n_layers:
                raise ArtifactError(f"gates at {source} were trained for {gates.n_layers} layers "
                                    f"({gates.base_model}); this model has {an.n_layers} ({model_id(model)})")
            check_base_model(gates.base_model, model_id(model), what=f"gates at {source}", force=force)
            check_forward_finite(model, gates, f"gates {source}")
        return gates

    def model_card(self, config: dict) -> str:
        return self._card(self.extra)

    def save(self, path: str | Path, extra: dict | None = None, overwrite: bool = True) -> Path:
        """Write the artifact folder (config, ``gates.safetensors``, model card) atomically; ``extra``
        (the training record) goes into the config."""

        if extra is not None:
            self.extra = dict(extra)
        return write_state(GATES, self, path, overwrite=overwrite)

    def push_to_hub(self, repo_id: str, *, private: bool = True, token: str | None = None,
                    revision: str | None = None, commit_message: str | None = None, **kw) -> str:
        """Save (``extra=`` as in :meth:`save`) into a temporary folder and upload it to the Hub repo
        ``repo_id``; return the repo URL. ``geosteer.load(repo_id, model=...)`` reads it back."""

        return push_artifact(self, repo_id, private=private, token=token, revision=revision,
                             commit_message=commit_message or "Upload geosteer FFN gates", **kw)

    def _card(self, extra: dict) -> str:
        train = dict(extra.get("train") or {})
        ev = extra.get("eval") or {}
        s = self.summary()
        training = {"data": "bundled corpus, train split", **{k: v for k, v in train.items() if v is not None}}
        return render_model_card(
            method="dynamics.gates", base_model=str(self.base_model), title=f"FFN gates for {self.base_model}",
            summary="Learned scalar FFN gates α_ℓ (geosteer FFN steering field, paper Eq. 23). Load with "
                    "`geosteer.dynamics.gates.load_gates(folder, model)`.",
            training=training, n_parameters=self.alpha.numel(), files=[CONFIG_NAME, WEIGHTS_NAME],
            ppl_before=math.exp(ev["loss_alpha1"]) if ev.get("loss_alpha1") is not None else None,
            ppl_after=math.exp(ev["loss_gates"]) if ev.get("loss_gates") is not None else None,
            extra={"gated layers": len(self.layers), "alpha mean": s["mean"], "alpha min": s["min"],
                   "alpha max": s["max"], **({"held-out ΔL vs α = 1": ev["delta_loss"]}
                                              if ev.get("delta_loss") is not None else {})},
            tags=["ffn-gates"])


_KNOWN = ("base_model", "extra", "init", "layers", "method", "n_layers")


def load_gates(path: str | Path, model: nn.Module | None = None, *, force: bool = False) -> FFNGates:
    """Load a gate artifact (a folder or Hub repo id); with ``model``, check that it fits (layer count, base
    model; ``force`` skips the base-model check)."""
    return load_state(GATES, path, model, force=force)


GATES = ArtifactFormat(FORMAT, VERSION, tensors=(WEIGHTS_NAME,), known_keys=_KNOWN, method="dynamics.gates",
                       saves=FFNGates)


def train_gates(model: nn.Module, tok, cfg, *, layers: Sequence[int] | None = None,
                out_dir: str | Path | None = None, progress: bool = False, log=print,
                train_ids: torch.Tensor | None = None) -> tuple[FFNGates, dict]:
    """Train gates with :func:`geosteer.train.train` (``cfg``: a :class:`geosteer.train.TrainConfig`).

    Returns the gates and the run summary (steps, tokens, loss history, held-out perplexity before/after).
    """

    gates = FFNGates.for_model(model, layers)
    result = train(model, gates, cfg, tok=tok, train_ids=train_ids, out_dir=out_dir, interventions=(gates,),
                   progress=progress, log=log, overwrite=True)
    model.eval()
    return gates, result.to_dict()
