"""Steering vectors as an intervention: one direction per layer at a hook point, with a multiplier.

A forward pre-hook reads where this forward's tokens sit (KV-cache length, attention mask or position ids;
padding is never steered). Modes and settings: :mod:`geosteer.vectors.config`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from geosteer.errors import ArtifactError, GeosteerError
from geosteer.hooks import attach_hooks
from geosteer.methods import push_artifact, save_artifact
from geosteer.models.anatomy import anatomy
from geosteer.served import Form
from geosteer.vectors.config import ApplyConfig, check_point
from geosteer.vectors.gguf import export_gguf


def steer_tensor(x: torch.Tensor, v: torch.Tensor, scale: float, mode: str) -> torch.Tensor:
    """The steered activation for every token of ``x`` (…, d) with vector ``v`` (d,)."""
    if mode in ("ablate", "ablate_add"):
        u = v / v.norm()
        y = x - (x @ u).unsqueeze(-1) * u
        return y + scale * v if mode == "ablate_add" else y
    y = x + scale * v
    if mode == "norm_match":
        y = y * (x.norm(dim=-1, keepdim=True) / y.norm(dim=-1, keepdim=True))
    return y


class _Positions:
    """Where the current forward's tokens sit (a model-level pre-hook fills it; cleared after the forward)."""

    def __init__(self) -> None:
        self.past = 0
        self.mask: torch.Tensor | None = None
        self.position_ids: torch.Tensor | None = None

    def pre(self, mod, args, kwargs) -> None:
        cache_pos = kwargs.get("cache_position")
        cache = next((v for v in kwargs.values() if hasattr(v, "get_seq_length")), None)  # the KV cache
        if isinstance(cache_pos, torch.Tensor) and cache_pos.numel():
            self.past = int(cache_pos.reshape(-1)[0])
        elif cache is not None:
            self.past = int(cache.get_seq_length())
        else:
            self.past = 0
        mask, pos = kwargs.get("attention_mask"), kwargs.get("position_ids")
        self.mask = mask if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
        self.position_ids = pos if isinstance(pos, torch.Tensor) and pos.dim() == 2 else None

    def post(self, mod, args, kwargs, out) -> None:
        self.past, self.mask, self.position_ids = 0, None, None

    def index(self, q: int, device) -> torch.Tensor:
        """(rows or 1, q) token index of each position, counted from the row's first real token; −1 for
        padding. From the attention mask when given, else the position ids, else the cache length."""
        if self.mask is not None and self.mask.shape[1] >= q:
            m = self.mask.to(device=device, dtype=torch.long)
            idx = (m.cumsum(-1) - 1)[:, -q:]
            return torch.where(m[:, -q:] > 0, idx, torch.full_like(idx, -1))
        if self.position_ids is not None and self.position_ids.shape[1] == q:
            return self.position_ids.to(device)
        return (self.past + torch.arange(q, device=device))[None]


@dataclass
class SteeringVectors:
    """One steering vector per layer at ``point``, with how to apply them (``settings``).

    ``with_(scale=4, mode="ablate_add", from_token=0, phase="generation", layers=[5])`` gives a copy with
    other settings (the tensors are shared). ``save``/``push_to_hub``/``export_gguf``: the artifact.
    """

    vectors: dict[int, torch.Tensor]
    point: str = "resid_post"
    base_model: str | None = None
    model_type: str = ""
    d_model: int | None = None
    n_layers: int | None = None
    extraction: dict = field(default_factory=dict)
    settings: ApplyConfig = field(default_factory=ApplyConfig)
    layers: Sequence[int] | None = None  # the stored layers to apply (None: all)

    def __post_init__(self) -> None:
        check_point(self.point)
        if not self.vectors:
            raise GeosteerError("steering vectors need at least one layer")
        self.vectors = {int(k): v.detach().reshape(-1) for k, v in sorted(self.vectors.items())}
        bad = [layer for layer, v in self.vectors.items() if not bool(torch.isfinite(v).all())]
        if bad:
            raise GeosteerError(f"the steering vector of layer {bad[0]} is not finite (NaN or inf)")
        dims = {v.numel() for v in self.vectors.values()}
        if len(dims) != 1:
            raise GeosteerError(f"steering vectors of different sizes: {sorted(dims)}")
        if self.layers is not None:
            missing = sorted(set(int(x) for x in self.layers) - set(self.vectors))
            if missing:
                raise GeosteerError(f"no vector for layer {missing[0]}; these vectors hold layers "
                                    f"{', '.join(map(str, self.vectors))}")
            self.layers = sorted(int(x) for x in self.layers)

    def with_(self, **settings) -> SteeringVectors:
        """A copy with other apply settings (``scale``, ``mode``, ``from_token``, ``phase``) or ``layers``."""
        layers = settings.pop("layers", self.layers)
        return dataclasses.replace(self, settings=ApplyConfig(**{**self.settings.to_dict(), **settings}),
                                   layers=layers)

    @property
    def active_layers(self) -> list[int]:
        return list(self.layers) if self.layers is not None else list(self.vectors)

    def norms(self) -> dict[int, float]:
        return {layer: float(v.float().norm()) for layer, v in self.vectors.items()}

    def _check_model(self, model: nn.Module) -> None:
        an = anatomy(model)
        got = str(getattr(getattr(model, "config", None), "model_type", "") or "")
        if self.base_model is None and self.model_type and got and self.model_type != got:
            raise ArtifactError(f"these steering vectors are for a '{self.model_type}' model (a GGUF model_hint), "
                                f"not for this '{got}' model; import them with import_gguf(path, model, "
                                "force=True) to use them anyway")
        if self.d_model is not None and an.d_model != self.d_model:
            raise ArtifactError(f"steering vectors of size {self.d_model} do not fit this model "
                                f"(d_model {an.d_model})")
        an.check_layers(self.active_layers)

    def attach(self, model: nn.Module) -> Callable[[], None]:
        s = self.settings
        if s.scale == 0:
            return lambda: None  # the stock model, in every mode
        self._check_model(model)
        where = _Positions()
        cache: dict = {}

        def fn(x: torch.Tensor, ctx) -> torch.Tensor | None:
            prompt_pass = where.past == 0
            if (s.phase == "prompt" and not prompt_pass) or (s.phase == "generation" and prompt_pass):
                return None
            key = (ctx.layer, x.device, x.dtype)
            if key not in cache:
                cache[key] = self.vectors[ctx.layer].to(device=x.device, dtype=x.dtype)
            y = steer_tensor(x, cache[key], s.scale, s.mode)
            idx = where.index(x.shape[1], x.device)
            if bool((idx >= s.from_token).all()):
                return y
            return torch.where((idx >= s.from_token).unsqueeze(-1), y, x)

        pre = model.register_forward_pre_hook(where.pre, with_kwargs=True)
        post = model.register_forward_hook(where.post, with_kwargs=True)
        try:
            remove_hooks = attach_hooks(model, self.point, self.active_layers, fn)
        except Exception:
            pre.remove()
            post.remove()
            raise

        def remove() -> None:
            remove_hooks()
            pre.remove()
            post.remove()

        return remove

    def served_ops(self, ops) -> None:
        """The same steering on each served layer (``geosteer.served``): a token is steered when its
        position is >= ``from_token`` and it lies in the phase (``prompt``: the prompt's tokens, what the
        Hugging Face path runs with an empty KV cache; ``generation``: the tokens after them)."""
        s = self.settings
        if s.scale == 0:
            return
        if ops.d_model is not None and self.d_model is not None and ops.d_model != self.d_model:
            raise ArtifactError(f"steering vectors of size {self.d_model} do not fit this model "
                                f"(d_model {ops.d_model})")
        ops.prompt_dependent = ops.prompt_dependent or s.phase != "all"
        every = s.phase == "all" and s.from_token == 0
        for layer in self.active_layers:
            cast = {(torch.device("cpu"), torch.float32): self.vectors[layer].float().clone()}

            def fn(t, st, tokens, cast=cast):
                key = (t.device, t.dtype)
                if key not in cast:
                    cast[key] = next(iter(cast.values())).to(device=t.device, dtype=t.dtype)
                y = steer_tensor(t, cast[key], s.scale, s.mode)
                if every:
                    return y
                keep = tokens.positions >= s.from_token
                if s.phase != "all":
                    keep = keep & (tokens.in_prompt if s.phase == "prompt" else ~tokens.in_prompt)
                return torch.where(keep.unsqueeze(-1), y, t)

            ops.edit(layer, self.point, fn, Form(
                vector=self.vectors[layer].float().clone(), scale=0.0 if s.mode == "ablate" else float(s.scale),
                ablate=s.mode in ("ablate", "ablate_add"), norm_match=s.mode == "norm_match",
                from_token=int(s.from_token), phase=s.phase))

    # -- the artifact (geosteer.vectors.artifact) ------------------------------------------------------------
    # (through the registry: geosteer.vectors.artifact imports this module, so this one never imports it back)
    def save(self, folder: str | Path, *, overwrite: bool = True, command: str | None = None) -> Path:

        return save_artifact(self, folder, overwrite=overwrite, command=command)

    def push_to_hub(self, repo_id: str, *, folder: str | Path | None = None, private: bool = True,
                    token: str | None = None) -> str:

        if folder is not None:
            from geosteer.artifacts import push

            return push(self.save(folder), repo_id, private=private, token=token)
        return push_artifact(self, repo_id, private=private, token=token)

    def export_gguf(self, path: str | Path) -> Path:

        return export_gguf(self, path)
