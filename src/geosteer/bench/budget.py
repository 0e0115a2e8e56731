"""How much a benchmark run measures and trains: ``small`` (everyday use) and ``full``."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from geosteer.errors import GeosteerError


@dataclass(frozen=True)
class Budget:
    """The sizes of one run; every lever gets the same (so the comparison is matched)."""

    name: str
    validation_prompts: int  # per concept (at most)
    test_prompts: int
    new_tokens: int  # greedy tokens per continuation
    control_prompts: int  # neutral prompts for the control KL (evaluation)
    train_controls: int  # neutral prompts in the training objective's KL hinge
    train_texts: int  # texts per side the trained levers learn from (at most)
    train_words: int  # each training text cut to this many words
    steps: int  # optimisation steps of every trained lever
    strengths: tuple[float, ...]  # strength grid of the trained levers (0 is always measured)
    caa_layers: tuple[float, ...]  # CAA layers, as fractions of the depth
    caa_multipliers: tuple[float, ...]
    bootstrap: int = 2000

    def to_dict(self) -> dict:
        return asdict(self)


BUDGETS = {
    "small": Budget("small", validation_prompts=3, test_prompts=6, new_tokens=24, control_prompts=16,
                    train_controls=8, train_texts=6, train_words=20, steps=8, strengths=(0.5, 1.0, 2.0),
                    caa_layers=(0.25, 0.5), caa_multipliers=(1.0, 2.0, 4.0)),
    "full": Budget("full", validation_prompts=8, test_prompts=16, new_tokens=48, control_prompts=32,
                   train_controls=16, train_texts=32, train_words=48, steps=40,
                   strengths=(0.25, 0.5, 1.0, 1.5, 2.0, 3.0), caa_layers=(0.25, 0.5, 0.75),
                   caa_multipliers=(0.5, 1.0, 2.0, 4.0, 8.0)),
}


def get_budget(name: str) -> Budget:
    if name not in BUDGETS:
        raise GeosteerError(f"--budget {name!r}: valid budgets are {', '.join(BUDGETS)}")
    return BUDGETS[name]
