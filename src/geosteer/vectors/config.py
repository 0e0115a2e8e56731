"""Settings of steering-vector extraction and application, with their one-line validation.

:class:`ExtractConfig` (``point``, ``method``: ``mean_diff`` | ``pca`` | ``pca_diff`` | ``probe``,
``positions``) and :class:`ApplyConfig` (``mode``: ``add`` | ``ablate`` | ``ablate_add`` | ``norm_match``,
``from_token``, ``phase``); definitions in docs/vectors.md. A scale of 0 attaches nothing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from geosteer.errors import GeosteerError

POINTS = ("resid_pre", "resid_post", "attn_out", "mlp_out")
METHODS = ("mean_diff", "pca", "pca_diff", "probe")
PAIRED_METHODS = ("pca", "pca_diff")  # need one positive and one negative per pair
MODES = ("add", "ablate", "ablate_add", "norm_match")
PHASES = ("all", "prompt", "generation")


def _choice(name: str, value: str, valid: tuple[str, ...]) -> str:
    if value not in valid:
        raise GeosteerError(f"unknown {name} '{value}'; valid: {', '.join(valid)}")
    return value


def check_point(point: str) -> str:
    return _choice("hook point", point, POINTS)


def check_method(method: str) -> str:
    return _choice("method", method, METHODS)


def check_mode(mode: str) -> str:
    return _choice("vector mode", mode, MODES)


def check_phase(phase: str) -> str:
    return _choice("vector phase", phase, PHASES)


def parse_positions(spec: str | int) -> int | str:
    """``last`` → -1, ``all`` → ``"all"``, an integer (or its text) → itself; anything else refused."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        return spec
    text = str(spec).strip().lower()
    if text == "last":
        return -1
    if text == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise GeosteerError(f"bad positions '{spec}': last, all, or a token index (e.g. 3, or -2 for the "
                            "last two tokens)") from None


MAX_TOKEN_INDEX = 2**31 - 1  # vector_from's bound: the largest position an engine's int32 indices hold


def check_from_token(value) -> int:
    bad = f"vector_from must be a token index in 0-{MAX_TOKEN_INDEX} (got {str(value)[:40]!r})"
    if isinstance(value, bool):
        raise GeosteerError(bad)
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise GeosteerError(bad) from None
    if not math.isfinite(v) or not 0 <= v <= MAX_TOKEN_INDEX or v != int(v):
        raise GeosteerError(bad)
    return int(v)


def check_scale(value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GeosteerError(f"vector_scale must be a number (got {value!r})") from None
    if not math.isfinite(v):
        raise GeosteerError(f"vector_scale must be finite (got {value!r})")
    return v


@dataclass(frozen=True)
class ExtractConfig:
    """How vectors are extracted (see the module docstring)."""

    point: str = "resid_post"
    method: str = "mean_diff"
    positions: int | str = -1
    add_special_tokens: bool = True
    batch_size: int = 8

    def __post_init__(self) -> None:
        check_point(self.point)
        check_method(self.method)
        object.__setattr__(self, "positions", parse_positions(self.positions))
        if int(self.batch_size) < 1:
            raise GeosteerError(f"batch size must be >= 1 (got {self.batch_size})")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ApplyConfig:
    """How vectors are applied (see the module docstring)."""

    scale: float = 1.0
    mode: str = "add"
    from_token: int = 0
    phase: str = "all"

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_scale(self.scale))
        check_mode(self.mode)
        object.__setattr__(self, "from_token", check_from_token(self.from_token))
        check_phase(self.phase)

    def to_dict(self) -> dict:
        return asdict(self)
