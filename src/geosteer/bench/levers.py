"""The levers of the steering benchmark: a registry, and the two levers that train nothing.

A lever is ``build(setup) -> Prepared``: whatever it learns from the concept's lever split (nothing for
prompting; a mean difference for CAA; a run of the shared training objective for the learned levers,
:mod:`geosteer.bench.levers_learned`), and the candidate :class:`Point` s the operating-point rule chooses
from. Every point's interventions are reached through geosteer's public API (the recipe, the method
packages' learners, :func:`geosteer.steer`); a point of strength 0 is the stock model. ``cleanup()`` undoes
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
    extra); ``description``: one line for the docs and ``--help``."""

    name: str
    build: Callable[[Setup], Prepared]
    description: str
    needs: str | None = None


_LEVERS: dict[str, Lever] = {}


def register_lever(lever: Lever) -> Lever:
    if lever.name in _LEVERS:
        raise GeosteerError(f"lever {lever.name!r} is already registered")
    _LEVERS[lever.name] = lever
    return lever


def levers() -> dict[str, Lever]:
    """Every registered lever (the built-in ones first)."""
    import geosteer.bench.levers_learned  # noqa: F401 - registers the learned levers

    return dict(_LEVERS)


DEFAULT_LEVERS = ("prompting", "caa", "vector", "lora", "loreft", "surfaces", "walls", "scales", "ffn-gates")


def parse_levers(spec: str | None) -> list[str]:
    """``--levers a,b``: names checked against the registry (default: :data:`DEFAULT_LEVERS`)."""
    known = levers()
    names = list(DEFAULT_LEVERS) if not spec else [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise GeosteerError(f"--levers is empty; valid: {', '.join(known)}")
    bad = [n for n in names if n not in known]
    if bad:
        raise GeosteerError(f"--levers: unknown lever {bad[0]!r}; valid: {', '.join(known)}")
    if len(set(names)) != len(names):
        raise GeosteerError("--levers names a lever twice")
    return names


# ------------------------------------------------------------------------------------------ prompting
def instruction_for(concept) -> str:
    """The prompting lever's instruction for ``concept``."""
    from geosteer.bench.concepts import describe

    what = describe(concept)
    if concept.direction == "promote":
        return f"Whatever you are asked, make your answer about {what}."
    return f"Whatever you are asked, do not mention {what} in your answer."


def build_prompting(s: Setup) -> Prepared:
    """Strength 1: the instruction as the system prompt (chat) or a line before the prompt (plain text)."""
    text = instruction_for(s.concept)
    return Prepared([Point("prompting", 1.0, {"instruction": text}, no_interventions, instruction=text)], 0)


# ------------------------------------------------------------------------------------------------ CAA
def caa_layers(n_layers: int, fractions) -> list[int]:
    return sorted({min(n_layers - 1, max(0, round(f * (n_layers - 1)))) for f in fractions})


def build_caa(s: Setup) -> Prepared:
    """Mean difference of the residual stream (``resid_post``, mean over each text's tokens) between the
    toward and away texts (``geosteer.vectors.extract``), added × multiplier at every position of one layer;
    layer and multiplier are candidates of the operating-point rule."""
    from geosteer.bench.prompts import training_texts
    from geosteer.models.anatomy import anatomy
    from geosteer.vectors import extract

    layers = caa_layers(anatomy(s.model).n_layers, s.budget.caa_layers)
    pos, neg = training_texts(s, s.toward), training_texts(s, s.away)
    sv = extract(s.model, s.tok, positive=pos, negative=neg, layers=layers, point="resid_post",
                 method="mean_diff", positions="all")
    norms = sv.norms()
    points = [Point("caa", float(m), {"layer": layer, "multiplier": float(m)},
                    fixed([sv.with_(scale=float(m), layers=[layer])]))
              for layer in layers for m in s.budget.caa_multipliers]
    return Prepared(points, 0, {"vector_norms": {str(k): round(v, 4) for k, v in norms.items()}})


register_lever(Lever("prompting", build_prompting, "an instruction (system prompt through the chat template)"))
register_lever(Lever("caa", build_caa, "mean-difference vector; layer and multiplier chosen on validation"))
