"""Every built-in lever, registered; the default list and the ``--levers`` parser."""

from __future__ import annotations

import geosteer.bench.levers  # noqa: F401 - registers prompting and CAA
import geosteer.bench.levers_learned  # noqa: F401 - registers the learned levers
import geosteer.bench.levers_variants  # noqa: F401 - registers the variants of the learned surfaces

# isort: off
import geosteer.bench.family  # noqa: F401 - registers the family of the surfaces (after its members)
# isort: on
from geosteer.bench.registry import Lever, registered
from geosteer.errors import GeosteerError

DEFAULT_LEVERS = ("prompting", "caa", "vector", "lora", "loreft", "surfaces", "walls", "scales", "ffn-gates")


def levers() -> dict[str, Lever]:
    """Every registered lever (the built-in ones first)."""
    return registered()


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
