"""The lever registry of the steering benchmark: what a lever is, and what it builds.

A lever is ``build(setup) -> Prepared``: whatever it learns from the concept's lever split (nothing for
prompting; a mean difference for CAA; a run of the shared training objective for the learned levers,
:mod:`geosteer.bench.levers_learned`), and the candidate :class:`Point` s the operating-point rule chooses
from. Every point's interventions are reached through geosteer's public API (the recipe, the method
packages' faces, :func:`geosteer.steer`; :func:`recipe_point` for a lever saved as its method's artifact); a
point of strength 0 is the stock model. ``cleanup()`` undoes
anything a lever changed in the model (LoRA's adapter layers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from geosteer.errors import GeosteerError


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
    and control prompts (already formatted: :func:`geosteer.bench.prompts.format_prompt`), the budget."""

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
    log: Callable[[str], None] | None = None
    surfaces: str | None = None  # shipped surfaces to start from (the ``surfaces-shipped`` lever)
    rule: object | None = None  # the training rule (geosteer.bench.train_rule.TrainRule); None: the budget's
    kl_probe: Callable[[], float] | None = None  # the model's control KL against stock, as it is now (the stop)


@dataclass
class Prepared:
    """A lever made ready for one concept: its candidate points, its trainable parameter count."""

    points: list[Point]
    params: int
    info: dict = field(default_factory=dict)
    cleanup: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class Lever:
    """A registered lever: ``build(setup) -> Prepared``; ``needs``: a module it imports (an optional
    extra); ``description``: one line for the docs and ``--help``; ``version``: part of every checkpoint's
    fingerprint; ``members``: for a family (:mod:`geosteer.bench.family`), the levers whose candidate points
    it chooses from (its ``build`` is then never called)."""

    name: str
    build: Callable[[Setup], Prepared]
    description: str
    needs: str | None = None
    version: int = 1  # raised when what the lever computes changes (its checkpoints are then measured again)
    members: tuple[str, ...] = ()


_LEVERS: dict[str, Lever] = {}


def register_lever(lever: Lever) -> Lever:
    if lever.name in _LEVERS:
        raise GeosteerError(f"lever {lever.name!r} is already registered")
    for m in lever.members:
        if m not in _LEVERS or _LEVERS[m].members:
            raise GeosteerError(f"family {lever.name!r}: member {m!r} must be a registered lever, not a family")
    _LEVERS[lever.name] = lever
    return lever


def registered() -> dict[str, Lever]:
    """The levers registered so far (:func:`geosteer.bench.catalog.levers` registers the built-in ones first)."""
    return dict(_LEVERS)
