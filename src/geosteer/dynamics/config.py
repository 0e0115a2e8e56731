"""Configuration dataclasses and shared constants of the FFN-steering-field package."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# FFN variants of paper §4 ("Tangential effect of FFN"), applied per layer range.
VARIANTS = ("full", "zero", "radial", "tangential", "attn_zero")
# Parallelisation orders: low / high C_ℓ first, random (seeded), and "measured" = ascending single-layer ΔL
# (a check of the defect as a predictor: it costs one extra held-out evaluation per layer).
STRATEGIES = ("low", "random", "high", "measured")


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown FFN variant '{variant}'; valid: {', '.join(VARIANTS)}")
    return variant


def check_k(k: int) -> int:
    if isinstance(k, bool) or int(k) != k or k <= 0:
        raise ValueError(f"top-k needs k >= 1 (got {k})")
    return int(k)


@dataclass
class DiagnoseConfig:
    """What :func:`geosteer.dynamics.diagnostics.diagnose_text` reads and how it batches.

    ``tokens`` caps the held-out tokens (cut into windows of ``seq_len`` tokens, BOS first); ``eps`` is the
    ε of the defect C_ℓ (paper Eq. (22)).
    """

    split: str = "heldout"
    tokens: int = 2048
    seq_len: int = 256
    batch_size: int = 4
    eps: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("tokens", "seq_len", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2 (got {self.seq_len})")


@dataclass
class GateConfig:
    """Learned scalar FFN gates α_ℓ (paper §4 "FFN gate diagnostics", Eq. (23)).

    ``layers``: the gated layers (None = all). Gates start at ``init`` (1.0 = the stock model).
    """

    layers: list[int] | None = None
    init: float = 1.0
    method: str = "dynamics.gates"
    version: int = 1
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)
