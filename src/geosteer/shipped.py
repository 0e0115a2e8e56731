"""Artifacts shipped inside the package, reachable by name from anywhere geosteer takes an artifact folder.

The trained SmolLM2 surfaces (all 30 layers) live in ``geosteer/assets/surfaces/``: ``smollm2-surfaces-fluent``
(trained with a fluency term; the default of ``geosteer demo``) and ``smollm2-surfaces-all`` (lower perplexity,
less fluent greedy text); beside them ``qwen2.5-0.5b-surfaces-all``, every layer of Qwen2.5-Coder-0.5B (the scale
ladder's surfaces). ``--surfaces NAME``, ``--set surfaces=NAME``, ``--recipe NAME`` and
``geosteer.load(NAME, model=m)`` all find them, in a clone or after ``pip install``. A local folder of the
same name, where one exists, comes first.
"""

from __future__ import annotations

from pathlib import Path

from geosteer.formats import CONFIG_NAME

#: Folders whose sub-folders are shipped artifacts, by name.
SHIPPED_ROOTS = (Path(__file__).resolve().parent / "assets" / "surfaces",)


def names() -> list[str]:
    """The names of the shipped artifacts."""
    return sorted(p.name for root in SHIPPED_ROOTS if root.is_dir() for p in root.iterdir()
                  if (p / CONFIG_NAME).is_file())


def shipped(name: str | Path) -> Path | None:
    """The folder of the shipped artifact called ``name`` (a plain name, no path), or None."""
    text = str(name)
    if not text or "/" in text or "\\" in text or text.startswith("."):
        return None
    for root in SHIPPED_ROOTS:
        if (root / text / CONFIG_NAME).is_file():
            return root / text
    return None


def expand(ref):
    """``ref`` itself when it names an existing path (or is not a shipped name), else the shipped folder of
    that name: what every artifact reference goes through first."""
    if isinstance(ref, (str, Path)) and not Path(ref).exists():
        found = shipped(ref)
        if found is not None:
            return found
    return ref
