"""The paper's table: the studies and formula checks of each method, declared by this package, not by the method.

``geosteer_paper.<method>`` calls :func:`register_paper` on import; :data:`PAPERS`
lists those modules, and a plugin (or a test) may register more for any method name."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass

PAPERS = ("geosteer_paper.manifold", "geosteer_paper.directional", "geosteer_paper.dynamics",
          "geosteer_paper.vectors")


@dataclass(frozen=True)
class Study:
    """One paper experiment of a method, run as ``geosteer study <method> <name>``.

    ``command``: ``"module:function"``, a typer command function (imported only when the CLI is built);
    ``paper``: the paper item it reproduces (shown in its help and in ``geosteer study --list``).
    """

    name: str
    command: str
    paper: str = ""


@dataclass(frozen=True)
class Check:
    """One formula check against an independent reference (``geosteer study checks``).

    ``run``: ``"module:function"``; the function takes ``(model, tokenizer)`` when ``families`` names the
    tiny families it runs on, nothing when it is empty (synthetic inputs), and returns the largest absolute
    error against its reference; it passes when that is ≤ ``tolerance``. ``item``: the paper item it checks.
    """

    item: str
    name: str
    run: str
    tolerance: float
    families: tuple[str, ...] = ()


_STUDIES: dict[str, dict[str, Study]] = {}
_CHECKS: dict[str, list[Check]] = {}
_loaded = False


def register_study(method: str, study: Study) -> Study:
    """Add ``study`` to ``method``'s studies (the same name again replaces it)."""
    _STUDIES.setdefault(method, {})[study.name] = study
    return study


def unregister_study(method: str, name: str) -> None:
    """Remove a study (tests, plugins); unknown names are ignored."""
    _STUDIES.get(method, {}).pop(name, None)
    if not _STUDIES.get(method, True):
        _STUDIES.pop(method)


def register_check(method: str, check: Check) -> Check:
    """Add ``check`` to ``method``'s formula checks."""
    _CHECKS.setdefault(method, []).append(check)
    return check


def register_paper(method: str, studies: Iterable[Study] = (), checks: Iterable[Check] = ()) -> None:
    """Add ``method``'s studies and formula checks, in their order."""
    for study in studies:
        register_study(method, study)
    for check in checks:
        register_check(method, check)


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for name in PAPERS:
            importlib.import_module(name)


def _ordered(table: dict) -> list[str]:
    """The methods of ``table``: those of :data:`PAPERS` in its order (whatever was imported first), then the
    others in registration order."""
    _load()
    builtin = [p.rsplit(".", 1)[-1] for p in PAPERS]
    return [m for m in builtin if m in table] + [m for m in table if m not in builtin]


def studies() -> dict[str, tuple[Study, ...]]:
    """Each method's studies, in the order of :data:`PAPERS`, then the methods registered later."""
    return {m: tuple(_STUDIES[m].values()) for m in _ordered(_STUDIES) if _STUDIES[m]}


def checks() -> list[Check]:
    """Every formula check, in method then declaration order."""
    return [c for m in _ordered(_CHECKS) for c in _CHECKS[m]]
