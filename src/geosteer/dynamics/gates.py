"""Learned scalar FFN gates α_ℓ (paper §4 "FFN gate diagnostics", Eq. (23); App. C.1, Table 4).

x_{ℓ+1} = y_ℓ + α_ℓ Φ_ℓ(y_ℓ) in the model's native block (sequential: y_ℓ = x_ℓ + A_ℓ(x_ℓ); parallel-residual
blocks keep their convention, the gate scales the FFN update that the block adds). The gates are the only
trainable parameters; they are trained with the shared loop :func:`geosteer.train.train` on the corpus'
train split and saved as an artifact folder (``geosteer_config.json`` + ``gates.safetensors``), written
atomically. Gates equal to one give the stock logits exactly (x · 1.0 is exact in IEEE arithmetic).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from geosteer.artifacts import (
    CARD_NAME,
    CONFIG_NAME,
    check_config,
    render_model_card,
    write_folder_atomic,
)
from geosteer.dynamics.config import GateConfig
from geosteer.errors import ArtifactError
from geosteer.hooks import attach_hooks
from geosteer.methods import ArtifactFormat
from geosteer.models.anatomy import anatomy

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

    @classmethod
    def for_model(cls, model: nn.Module, layers: Sequence[int] | None = None, init: float = 1.0) -> FFNGates:
        from geosteer.models.loading import model_id

        an = anatomy(model)
        return cls(an.n_layers, an.check_layers(layers), init, base_model=model_id(model))

    def gate_of(self, layer: int) -> float:
        return float(self.alpha[self.layers.index(layer)])

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
            ops.edit(layer, "mlp_out", lambda t, st, tokens, a=alpha[i]: t * a.to(device=t.device, dtype=t.dtype))

    def table(self) -> list[dict]:
        alpha = self.alpha.detach()
        return [{"layer": layer, "alpha": float(a)} for layer, a in zip(self.layers, alpha, strict=True)]

    def summary(self) -> dict:
        a = self.alpha.detach()
        return {"mean": float(a.mean()), "min": float(a.min()), "max": float(a.max()), "n": a.numel()}

    def config(self) -> dict:
        cfg = GateConfig(layers=self.layers, init=1.0)
        return {**GATES.header(), **cfg.to_dict(), "n_layers": self.n_layers,
                "base_model": self.base_model}

    def save(self, path: str | Path, extra: dict | None = None, overwrite: bool = True) -> Path:
        """Write the artifact folder (config, ``gates.safetensors``, model card) atomically."""
        from safetensors.torch import save_file

        cfg = self.config()
        if extra:
            cfg["extra"] = extra

        def fill(tmp: Path) -> None:
            save_file({"alpha": self.alpha.detach().cpu().contiguous()}, str(tmp / WEIGHTS_NAME),
                      metadata={"format": FORMAT, "version": str(VERSION)})
            cfg["sha256"] = _file_sha256(tmp / WEIGHTS_NAME)
            (tmp / CONFIG_NAME).write_text(json.dumps(cfg, indent=2) + "\n")
            (tmp / CARD_NAME).write_text(self._card(extra or {}))

        return write_folder_atomic(path, fill, overwrite=overwrite, kind=FORMAT)

    def push_to_hub(self, repo_id: str, *, private: bool = True, token: str | None = None,
                    revision: str | None = None, commit_message: str | None = None, **kw) -> str:
        """Save (``extra=`` as in :meth:`save`) into a temporary folder and upload it to the Hub repo
        ``repo_id``; return the repo URL. ``geosteer.load(repo_id, model=...)`` reads it back."""
        from geosteer.methods import push_artifact

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


_KNOWN = {"layers", "init", "method", "extra", "n_layers", "base_model", "sha256"}


def _file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_gates(path: str | Path, model: nn.Module | None = None) -> FFNGates:
    """Load a gate artifact; with ``model``, check that it fits (layer count, base model id).

    Reads the versioned format (``format: geosteer-gates``) and the first, unversioned one (``method`` only).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from geosteer.artifacts import locate
    from geosteer.config_schema import GatesConfig, read_config_json, validate_config
    from geosteer.overflow import check_forward_finite

    path = locate(path)  # a folder, or a Hub repo id org/name[@revision]
    cfg_file, w_file = path / CONFIG_NAME, path / WEIGHTS_NAME
    if not cfg_file.is_file() or not w_file.is_file():
        raise ArtifactError(f"{path} is not a gate artifact (needs {CONFIG_NAME} and {WEIGHTS_NAME})")
    cfg = read_config_json(cfg_file)
    if isinstance(cfg, dict) and "format" in cfg:
        check_config(cfg, fmt=FORMAT, reader_version=VERSION, known_keys=_KNOWN, source=path)
    elif not isinstance(cfg, dict) or cfg.get("method") != "dynamics.gates":
        got = cfg.get("method") if isinstance(cfg, dict) else None
        raise ArtifactError(f"{path} holds a '{str(got)[:80]}' artifact, not dynamics.gates")
    else:
        validate_config(cfg, GatesConfig, path)  # the first, unversioned format: the same field checks
    if cfg.get("sha256") is not None and _file_sha256(w_file) != cfg["sha256"]:
        raise ArtifactError(f"{w_file} does not match its config (checksum differs): the artifact was "
                            "modified or only partly copied")
    try:
        alpha = load_file(str(w_file)).get("alpha")
    except (SafetensorError, OSError, ValueError) as e:
        raise ArtifactError(f"{w_file} is not a readable safetensors file ({e})") from None
    if alpha is None or not alpha.is_floating_point() or alpha.shape != (len(cfg["layers"]),):
        raise ArtifactError(f"{w_file}: expected a float tensor 'alpha' of shape ({len(cfg['layers'])},), one "
                            "gate per layer")
    if not bool(torch.isfinite(alpha).all()):
        raise ArtifactError(f"{w_file}: the gates hold NaN or infinite values")
    gates = FFNGates(cfg["n_layers"], cfg["layers"], base_model=cfg.get("base_model"))
    with torch.no_grad():
        gates.alpha.copy_(alpha)
    if model is not None:
        from geosteer.models.loading import model_id

        an = anatomy(model)
        if an.n_layers != gates.n_layers:
            raise ArtifactError(f"gates at {path} were trained for {gates.n_layers} layers "
                                f"({gates.base_model}); this model has {an.n_layers} ({model_id(model)})")
        if gates.base_model != model_id(model):
            raise ArtifactError(f"gates at {path} were trained on '{gates.base_model}', "
                                f"not on '{model_id(model)}'")
        check_forward_finite(model, gates, f"gates {path}")
    return gates


GATES = ArtifactFormat(FORMAT, VERSION, tensors=(WEIGHTS_NAME,), known_keys=tuple(sorted(_KNOWN)),
                       load=lambda folder, model: load_gates(folder, model), method="dynamics.gates",
                       saves=FFNGates, save=lambda gates, folder, **kw: gates.save(folder, **kw))
GATES_V0 = ArtifactFormat("dynamics.gates", 0, tensors=(WEIGHTS_NAME,), load=GATES.load,
                          method="dynamics.gates")  # the first, unversioned gate artifacts


def train_gates(model: nn.Module, tok, cfg, *, layers: Sequence[int] | None = None,
                out_dir: str | Path | None = None, progress: bool = False, log=print,
                train_ids: torch.Tensor | None = None) -> tuple[FFNGates, dict]:
    """Train gates with :func:`geosteer.train.train` (``cfg``: a :class:`geosteer.train.TrainConfig`).

    Returns the gates and the run summary (steps, tokens, loss history, held-out perplexity before/after).
    """
    from geosteer.train import train

    gates = FFNGates.for_model(model, layers)
    result = train(model, gates, cfg, tok=tok, train_ids=train_ids, out_dir=out_dir, interventions=(gates,),
                   progress=progress, log=log, overwrite=True)
    model.eval()
    return gates, result.to_dict()
