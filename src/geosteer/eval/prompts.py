"""Bundled prompt sets (JSON under ``geosteer/data/prompts/``): ``manifold_prompts`` (120 over 12
categories), ``steering_prompts`` (10), ``wall_prompts`` (5 unsafe-sounding requests and 5 matched controls).
Any ``{"name", "description", "prompts": [{"category", "text", ...}]}`` file loads with :func:`load_prompts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from geosteer.errors import GeosteerError
from geosteer.readers import read_json

PROMPT_DIR = Path(__file__).resolve().parent.parent / "data" / "prompts"


@dataclass(frozen=True)
class Prompt:
    text: str
    category: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)


def prompt_sets() -> list[str]:
    """Names of the bundled prompt sets."""
    return sorted(p.stem for p in PROMPT_DIR.glob("*.json"))


def load_prompts(name_or_path: str | Path, categories: list[str] | None = None) -> list[Prompt]:
    """A bundled set by name (e.g. ``"manifold_prompts"``) or a JSON file; optionally only ``categories``."""
    p = Path(name_or_path)
    if not p.suffix:
        p = PROMPT_DIR / f"{name_or_path}.json"
        if not p.is_file():
            raise GeosteerError(f"unknown prompt set '{name_or_path}'; bundled: {', '.join(prompt_sets())}")
    if not p.is_file():
        raise GeosteerError(f"prompt file not found: {p}")

    doc = read_json(p, what="prompt file")  # bounded: a regular file, size/nesting caps, valid Unicode
    try:
        items = doc["prompts"] if isinstance(doc, dict) else doc
        out = []
        for it in items:
            if isinstance(it, str):
                out.append(Prompt(it))
            else:
                extra = {k: v for k, v in it.items() if k not in ("text", "category")}
                out.append(Prompt(str(it["text"]), str(it.get("category", "")), extra))
    except (KeyError, TypeError, AttributeError) as e:
        raise GeosteerError(f"{p} is not a prompt set (expected {{'prompts': [{{'category', 'text'}}]}}): "
                            f"{type(e).__name__}: {e}") from None
    if categories is not None:
        known = sorted({q.category for q in out})
        bad = [c for c in categories if c not in known]
        if bad:
            raise GeosteerError(f"unknown category '{bad[0]}' in {p.name}; valid: {', '.join(known)}")
        out = [q for q in out if q.category in categories]
    if not out:
        raise GeosteerError(f"prompt set {p} is empty")
    return out


def by_category(prompts: list[Prompt]) -> dict[str, list[Prompt]]:
    """Prompts grouped by category, in first-seen order."""
    out: dict[str, list[Prompt]] = {}
    for q in prompts:
        out.setdefault(q.category, []).append(q)
    return out
