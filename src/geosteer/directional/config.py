"""Configuration of directional component-scaling interventions (paper Section 4.3, Eq. 11)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from geosteer.errors import GeosteerError
from geosteer.models.anatomy import parse_indices, parse_layers  # noqa: F401 - parse_layers re-exported

# Where ỹ = s∥·y∥ + s⊥·y⊥ is applied (reference in brackets); residual sites are the hook points they edit:
#   attn_out            attention update A            [block input x, not normed]          (Eq. 4, 11)
#   mlp_out             MLP update Φ                  [the MLP's incoming residual: x + A, or x if parallel]
#   resid_post          block update x' − x           [block input x]
#   value_full          attention aggregate o_t       [the token's own value v_t, per head]  (Eq. 8)
#   value_exclude_self  only the non-self part c_t    [v_t]; d_t = A_tt·v_t kept, no renormalisation (Eq. 10)
#   diag_removal        control: A_tt = 0, renormalised over the other positions (scales ignored)
SITES = ("attn_out", "mlp_out", "resid_post", "value_full", "value_exclude_self", "diag_removal")
RESIDUAL_SITES = SITES[:3]
VALUE_SITES = SITES[3:]
# Value space of value_full / value_exclude_self: "head" decomposes each head's o_t against that head's
# v_t (the paper's block-diagonal operator, the default); "concat" decomposes the concatenation of all
# heads' o_t against the concatenation of their v_t (GQA: each query head's own kv head), one α per token.
VALUE_SPACES = ("head", "concat")
DEFAULT_VALUE_SPACE = "head"


def check_site(site: str) -> str:
    """``site`` if it is one of ``SITES``; otherwise one line naming the valid ones."""
    if site not in SITES:
        raise GeosteerError(f"unknown site '{site}'; valid: {', '.join(SITES)}")
    return site


def check_value_space(space: str) -> str:
    """``space`` if it is one of ``VALUE_SPACES``; otherwise one line naming the valid ones."""
    if space not in VALUE_SPACES:
        raise GeosteerError(f"unknown value space '{space}'; valid: {', '.join(VALUE_SPACES)}")
    return space


def check_scale(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GeosteerError(f"{name} must be a number (got {value!r})") from None
    if not math.isfinite(v):
        raise GeosteerError(f"{name} must be finite (got {value!r})")
    return v


def parse_heads(spec: str | Sequence[int] | None) -> list[int] | None:
    """``None``/``"all"`` → None (all heads); ``"0,3"``/``"0-2"``/``[0, 3]`` → a sorted list (the one index
    parser, :func:`geosteer.models.anatomy.parse_indices`; the range is checked by :func:`check_heads`)."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "all"):
        return None
    return sorted(parse_indices(spec, None, "head"))


def check_heads(heads: Sequence[int] | None, n_heads: int) -> list[int] | None:
    """Validate a head selection against a model with ``n_heads`` query heads."""
    if heads is None:
        return None
    bad = [h for h in heads if not 0 <= h < n_heads]
    if bad:
        raise GeosteerError(f"head {bad[0]} out of range: this model has heads 0..{n_heads - 1}")
    return list(heads)


@dataclass
class ComponentScaleConfig:
    """One component-scaling edit: ``site``, scales ``s_par`` (s∥), ``s_perp`` (s⊥), ``layers``;
    for value sites also ``heads`` (query heads edited; None = all) and ``value_space`` (``VALUE_SPACES``)."""

    site: str
    s_par: float = 1.0
    s_perp: float = 1.0
    layers: list[int] | None = field(default=None)
    heads: list[int] | None = field(default=None)
    value_space: str = DEFAULT_VALUE_SPACE

    def __post_init__(self) -> None:
        self.site = check_site(self.site)
        self.s_par = check_scale("s_par", self.s_par)
        self.s_perp = check_scale("s_perp", self.s_perp)
        if self.layers is not None:
            self.layers = [int(i) for i in self.layers]
        self.heads = parse_heads(self.heads)
        if self.heads is not None and self.site in RESIDUAL_SITES:
            raise GeosteerError(f"a head selection needs a value site ({', '.join(VALUE_SITES)}); "
                                f"'{self.site}' edits the whole residual update")
        check_value_space(self.value_space)
        if self.value_space == "concat" and self.heads is not None:
            raise GeosteerError("value_space='concat' decomposes all heads together; "
                                "a head selection needs value_space='head'")

    @property
    def is_neutral(self) -> bool:
        return self.site != "diag_removal" and self.s_par == 1.0 and self.s_perp == 1.0

    def to_dict(self) -> dict:
        return asdict(self)
