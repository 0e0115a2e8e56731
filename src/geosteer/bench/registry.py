"""What a lever of the steering benchmark is built from and what it yields.

A lever is built (:func:`geosteer.bench.matched.build`) from a :class:`Setup`: the model, the concept, its lever
texts and prompts; it yields :class:`Point` s, one setting each. Every point's interventions are reached through
geosteer's public API (the recipe, the method packages' faces, :func:`geosteer.steer`; :func:`recipe_point` for a
lever saved as its method's artifact); a point of strength 0 is the stock model. A :class:`Prepared` lever's
``cleanup()`` undoes anything it changed in the model (LoRA's adapter layers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Point:
    """One candidate setting of a lever. ``interventions()`` is a context manager yielding the interventions
    to attach (it may change module state while open); ``instruction``: the prompting lever's instruction."""

    lever: str
    strength: float
    params: dict
    interventions: Callable[[], contextlib.AbstractContextManager[list]]
    instruction: str | None = None

    @property
    def label(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.lever} s={self.strength:g}" + (f" ({extra})" if extra else "")


@contextlib.contextmanager
def no_interventions() -> Iterator[list]:
    yield []


def fixed(ivs: list) -> Callable[[], contextlib.AbstractContextManager[list]]:
    """A point whose interventions are a fixed list."""
    @contextlib.contextmanager
    def ctx() -> Iterator[list]:
        yield list(ivs)
    return ctx


def recipe_point(lever: str, strength: float, values: dict, params: dict | None = None) -> Point:
    """A point whose one intervention is the recipe ``values`` (:class:`geosteer.recipe.InterventionSpec`,
    built from the method registry when attached): a learned lever saved as its method's artifact, at the
    strength its recipe key gives (0: the stock model)."""
    from geosteer.recipe import InterventionSpec

    return Point(lever, float(strength), dict(params or {}), fixed([InterventionSpec(**values)]))


def stock_point(lever: str = "stock") -> Point:
    return Point(lever, 0.0, {}, no_interventions)


@dataclass
class Setup:
    """What a lever learns from: the model, the concept, its lever texts (``toward`` / ``away``), training
    and control prompts (already formatted: :func:`geosteer.bench.prompts.format_prompt`), the budget
    (:class:`geosteer.bench.design.Budget`)."""

    model: object
    tok: object
    concept: object
    toward: list[str]
    away: list[str]
    train_prompts: list[str]
    train_controls: list[str]
    budget: object
    chat: bool
    seed: int
    work: Path
    train_tau: float = 0.1
    rule: object | None = None  # the training rule (geosteer.bench.train_rule.TrainRule); None: the budget's
    kl_probe: Callable[[], float] | None = None  # the model's control KL against stock, as it is now (the stop)


@dataclass
class Prepared:
    """A lever made ready for one concept: its points, its trainable parameter count."""

    points: list[Point]
    params: int
    info: dict = field(default_factory=dict)
    cleanup: Callable[[], None] = lambda: None
