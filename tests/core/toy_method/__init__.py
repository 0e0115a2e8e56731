"""A toy fifth method, packaged as a plugin would be: it scales the residual stream after some layers.

It follows docs/ARCHITECTURE.md's "how to add a method" and touches nothing in ``src/``: an intervention with
artifact state (``to_state``/``from_state``), its format, a CLI verb, and ``register_method`` on import. The
contract suite (``tests/core/test_method_contract.py``) runs it beside the built-in methods, in this process
and, registered through the ``geosteer.methods`` entry-point group, in a fresh one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import typer
from torch import nn

from geosteer.artifacts import ArtifactFormat, check_base_model
from geosteer.config_schema import Header, Layers, Name
from geosteer.errors import ArtifactError
from geosteer.hooks import attach_hooks
from geosteer.methods import Method, RecipeKey, register_method, save_artifact
from geosteer.models.anatomy import anatomy


class ToyScale:
    """Multiply ``resid_post`` of ``layers`` by ``factor`` (a tensor: the artifact's state)."""

    def __init__(self, factor: float | torch.Tensor, layers=(0,), base_model: str | None = None) -> None:
        self.factor = torch.as_tensor(factor, dtype=torch.float32).reshape(1)
        self.layers, self.base_model = [int(i) for i in layers], base_model

    def attach(self, model: nn.Module) -> Callable[[], None]:
        f = self.factor
        return attach_hooks(model, "resid_post", self.layers, lambda x, ctx: x * f.to(x.device, x.dtype))

    def to_state(self) -> tuple[dict, dict]:
        return {"base_model": self.base_model, "layers": self.layers}, {"factor": self.factor}

    @classmethod
    def from_state(cls, config: dict, tensors: dict, model=None, *, force: bool = False, source: str = ""):
        if set(tensors) != {"factor"} or tensors["factor"].shape != (1,):
            raise ArtifactError(f"{source}: expected one tensor 'factor' of shape (1,)")
        toy = cls(tensors["factor"], config["layers"], config.get("base_model"))
        if model is not None:
            from geosteer.models.loading import model_id

            check_base_model(toy.base_model, model_id(model), what=f"toy {source}", force=force)
            anatomy(model).check_layers(toy.layers)
        return toy

    def save(self, folder: str | Path) -> Path:
        return save_artifact(self, folder)


class ToyConfig(Header):
    """The toy's config schema (checked on every read, before from_state)."""

    base_model: Name
    layers: Layers


TOY_FORMAT = ArtifactFormat("geosteer-toy", 1, tensors=("toy.safetensors",), known_keys=("base_model", "layers"),
                            method="toy", saves=ToyScale, schema=ToyConfig)


def register_cli(app: typer.Typer) -> None:
    from geosteer.cli.common import JSON_OPT, emit

    @app.command("toy")
    def toy_cmd(factor: float = typer.Option(2.0, "--factor"), as_json: bool = JSON_OPT) -> None:
        """Toy method: scale the residual stream after layer 0."""
        if factor <= 0:
            raise ValueError(f"--factor must be > 0 (got {factor})")
        emit({"factor": factor}, as_json)


def build(model, values: dict, *, force: bool = False) -> list:
    from geosteer.methods import load_artifact

    out = [load_artifact(values["toy"], model)] if values["toy"] is not None else []
    return out + ([] if values["toy_factor"] == 1.0 else [ToyScale(values["toy_factor"])])


def examples(model, folder: Path) -> dict:
    from geosteer.models.loading import model_id

    ones = ToyScale(1.0, [0, 1], model_id(model)).save(folder / "toy-neutral")
    return {"neutral": {"toy": str(ones)},
            "active": {"toy": str(ToyScale(0.5, [1], model_id(model)).save(folder / "toy")), "toy_factor": 1.5}}


METHOD = Method(name="toy", summary="scale the residual stream after some layers",
                keys=(RecipeKey("toy", None, "toy artifact folder", kind="folder"),
                      RecipeKey("toy_factor", 1.0, "factor on layer 0's output", kind="number")),
                build=build, cli=register_cli, artifacts=(TOY_FORMAT,), examples=examples)


def register() -> Method:
    return register_method(METHOD)


register()
