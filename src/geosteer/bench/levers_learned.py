"""The pieces of the learned levers that live beside their methods (:mod:`geosteer.bench.matched` builds the levers):

- PEFT LoRA injected into the model and trained on the shared objective (:func:`train_lora`), its strength s
  scaling the adapters' ``scaling`` (:class:`_LoraScale`; s = 0 is the stock model), :func:`_remove_lora` putting
  the original layers back;
- learned exact walls on zero surfaces suppressing the away texts (walls only suppress; on or off,
  :func:`build_walls`).
"""

from __future__ import annotations

from geosteer.bench.registry import Point, Prepared, Setup, fixed

LORA_RANK = 4
SURFACE_GRID = 4


class _LoraScale:
    """The injected LoRA adapters' ``scaling`` multiplied by s while attached (0 otherwise: the stock model)."""

    def __init__(self, layers: list, base: list[float], s: float = 0.0) -> None:
        self.layers, self.base, self.s = layers, base, s

    def set(self, s: float) -> None:
        for m, b in zip(self.layers, self.base, strict=True):
            m.scaling["default"] = b * s

    def attach(self, model):
        self.set(self.s)
        return lambda: self.set(0.0)


def train_lora(s: Setup, lr: float, target_modules: list[str] | None = None, name: str = "lora"):
    """PEFT LoRA (rank :data:`LORA_RANK`) injected into ``s.model`` and trained on the shared objective:
    (adapter layers, their base scalings, trainable count, last logged step), the adapters off (scale 0)."""
    from geosteer.extras import require

    require("peft")
    from peft import LoraConfig, inject_adapter_in_model
    from peft.tuners.lora import LoraLayer
    from torch import nn

    from geosteer.bench.training import fit_module

    model = s.model
    before = {id(m) for m in model.modules()}
    inject_adapter_in_model(LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0,
                                       target_modules=target_modules), model)
    layers = [m for m in model.modules() if isinstance(m, LoraLayer) and id(m) not in before]
    base = [float(m.scaling["default"]) for m in layers]
    trainable = nn.ModuleList([m.lora_B for m in layers] + [m.lora_A for m in layers])
    switch = _LoraScale(layers, base, 1.0)

    class _Trainable(nn.Module):  # the adapters as one module that attaches at full scale
        def __init__(self):
            super().__init__()
            self.adapters = trainable

        def attach(self, model):
            return switch.attach(model)

    try:
        last = fit_module(s, _Trainable(), lr=lr, name=name)
    except BaseException:
        _remove_lora(model)
        raise
    switch.set(0.0)
    return layers, base, sum(p.numel() for p in trainable.parameters()), last


def _remove_lora(model) -> None:
    """Put the original linear layers back (the model is the stock model again)."""
    from peft.tuners.lora import LoraLayer

    for name, m in list(model.named_modules()):
        if isinstance(m, LoraLayer):
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], m.get_base_layer())
    if "peft_config" in model.__dict__:
        del model.peft_config


def _zero_bank(model):
    from geosteer.manifold import ManifoldConfig, SurfaceBank

    return SurfaceBank(ManifoldConfig.for_model(model, grid_size=SURFACE_GRID))


def build_walls(s: Setup) -> Prepared:
    """Walls learned on zero surfaces against the away texts: one point, the walls on (no point when the learner
    found no wall)."""
    from geosteer.bench.prompts import training_pairs
    from geosteer.manifold import WallLearnConfig, learn_walls

    cfg = WallLearnConfig(mode="walls", steps=s.budget.steps, lr=0.1, kl_threshold=s.train_tau, seed=s.seed,
                          add_bos=True, checkpoint_every=0, sparsity=0.002, candidates=64)
    bank, report = learn_walls(s.model, s.tok, _zero_bank(s.model), training_pairs(s, s.away), s.train_controls,
                               cfg, s.work / "walls", overwrite=True, promote=False, negatives=None, log=None)
    bank.coefficients.requires_grad_(False)
    walls = list(bank.walls)
    pts = [Point("walls", 1.0, {"walls": len(walls)}, fixed([bank]))] if walls else []
    return Prepared(pts, 5 * len(report.get("candidates") or []),
                    {"walls": len(walls), "train_eval": report.get("train_eval")})
