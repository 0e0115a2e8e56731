"""Fine-tuning baselines beside the learned FFN gates (paper 2's limitation: "the gate/editing studies are not
compared against full fine-tuning or editing baselines").

Every method is trained by the same loop (:func:`geosteer.train.train`) on the same train-split windows,
batch order and schedule, then scored on the same held-out windows:

- ``gates``: the paper's scalar FFN gates α_ℓ (:class:`geosteer.dynamics.gates.FFNGates`, one per layer);
- ``bias``: a bias-only fine-tune, one trainable vector b_ℓ added to each layer's FFN update
  (x_{ℓ+1} = y_ℓ + Φ_ℓ(y_ℓ) + b_ℓ; zero at the start, so it starts at the stock model);
- ``lora``: PEFT LoRA on the FFN down projections of every layer (rank r, lora_alpha = r), the FFN's own weights.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.errors import GeosteerError
from geosteer.eval.windows import mean_loss
from geosteer.hooks import attach_hooks
from geosteer.models.anatomy import anatomy
from geosteer.train import TrainConfig, train

METHODS = ("gates", "bias", "lora")


class FFNBias(nn.Module):
    """One trainable vector per layer added to that layer's FFN residual update (``mlp_out``)."""

    def __init__(self, n_layers: int, d_model: int, layers: Sequence[int] | None = None) -> None:
        super().__init__()
        self.layers = list(range(n_layers)) if layers is None else [int(i) for i in layers]
        self.bias = nn.Parameter(torch.zeros(len(self.layers), d_model))

    @classmethod
    def for_model(cls, model: nn.Module, layers: Sequence[int] | None = None) -> FFNBias:

        an = anatomy(model)
        return cls(an.n_layers, an.d_model, an.check_layers(layers))

    def attach(self, model: nn.Module) -> Callable[[], None]:

        index = {layer: i for i, layer in enumerate(self.layers)}

        def fn(phi, ctx):
            return phi + self.bias[index[ctx.layer]].to(device=phi.device, dtype=phi.dtype)

        return attach_hooks(model, "mlp_out", self.layers, fn)


def _lora(model: nn.Module, rank: int):
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=rank, lora_alpha=float(rank), lora_dropout=0.0, target_modules=["down_proj"], bias="none")
    return get_peft_model(model, cfg)


def _trainable(model: nn.Module, method: str, lora_rank: int):
    """(module whose parameters train, interventions attached while training and scoring, undo)."""
    if method == "gates":
        from geosteer.dynamics.gates import FFNGates

        g = FFNGates.for_model(model)
        return g, (g,), lambda: None
    if method == "bias":
        b = FFNBias.for_model(model)
        return b, (b,), lambda: None
    if method == "lora":
        flags = {n: p.requires_grad for n, p in model.named_parameters()}
        pm = _lora(model, lora_rank)

        def undo() -> None:
            pm.unload()
            for n, p in model.named_parameters():
                p.requires_grad_(flags.get(n, p.requires_grad))

        return pm, (), undo
    raise GeosteerError(f"unknown method '{method}'; valid: {', '.join(METHODS)}")


def finetune_rows(model: nn.Module, tok, heldout: torch.Tensor, methods: Sequence[str], lrs: dict[str, float],
                  cfg_kw: dict, lora_rank: int = 1, batch_size: int = 4, log=None) -> list[dict]:
    """Per method: trainable parameters, held-out mean NLL after training and its change against the stock
    model (``delta_loss``), the final training loss and the wall time; one ``stock`` row first."""

    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise GeosteerError(f"unknown method '{(bad or [''])[0]}'; valid: {', '.join(METHODS)}")
    if lora_rank < 1:
        raise GeosteerError(f"--lora-rank must be >= 1 (got {lora_rank})")
    base = mean_loss(model, heldout, batch_size)
    rows = [{"method": "stock", "params": 0, "lr": None, "loss": base, "delta_loss": 0.0}]
    for method in methods:
        trainable, ivs, undo = _trainable(model, method, lora_rank)
        try:
            n = sum(p.numel() for p in trainable.parameters() if p.requires_grad)
            cfg = TrainConfig(lr=lrs[method], eval_before_after=False, checkpoint_every=0, **cfg_kw)
            t0 = time.perf_counter()
            res = train(model, trainable, cfg, tok=tok, interventions=ivs, progress=False, log=log, overwrite=True)
            seconds = time.perf_counter() - t0
            loss = mean_loss(model, heldout, batch_size, ivs)
        finally:
            undo()
        rows.append({"method": method, "params": int(n), "lr": lrs[method], "loss": loss, "delta_loss": loss - base,
                     "train_loss_last": res.history[-1]["loss"] if res.history else None,
                     "train_tokens": res.tokens_seen, "seconds": seconds})
        if log is not None:
            log(str(rows[-1]))
    return rows
