"""Run the formula checks of the paper's table (:func:`geosteer_paper.registry.checks`); read their results back.

Each check compares a formula of the library with an independent reference and gives its largest absolute
error; a record per check and family says whether that error is within the check's tolerance."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from pathlib import Path

from geosteer.errors import GeosteerError
from geosteer_paper.registry import checks as registered_checks

CHECKS_FILE = "docs/results/checks.json"
COMMAND = f"geosteer study checks --out {CHECKS_FILE}"


def declared_checks() -> list:
    """Every declared check, in method then declaration order."""
    return registered_checks()


def _function(check) -> Callable:
    module, _, name = check.run.partition(":")
    return getattr(importlib.import_module(module), name)


def select(checks: list, items: list[str] | None, families: list[str] | None) -> list:
    """The checks of ``items`` (all when None); unknown items or families are refused in one line."""
    known = list(dict.fromkeys(c.item for c in checks))
    bad = sorted(set(items or []) - set(known))
    if bad:
        raise GeosteerError(f"--only: no check for item {bad[0]}; checked items: {', '.join(known)}")
    all_families = list(dict.fromkeys(f for c in checks for f in c.families))
    bad = sorted(set(families or []) - set(all_families))
    if bad:
        raise GeosteerError(f"--families: unknown family '{bad[0]}'; valid: {', '.join(all_families)}")
    return [c for c in checks if items is None or c.item in items]


def _record(check, family: str, error: float) -> dict:
    ok = math.isfinite(error) and error <= check.tolerance
    return {"item": check.item, "check": check.name, "family": family, "max_abs_error": error,
            "tolerance": check.tolerance, "pass": ok}


def run_checks(checks: list, families: list[str] | None = None, on_done: Callable[[dict], None] | None = None
               ) -> list[dict]:
    """One record per check and family (``family`` "synthetic" for checks on synthetic inputs); each tiny
    model is loaded once. ``families`` restricts the model families run."""
    import torch

    from geosteer.models.loading import load_model

    rows = []

    def done(row: dict) -> None:
        rows.append(row)
        if on_done is not None:
            on_done(row)

    torch.manual_seed(0)
    for c in (c for c in checks if not c.families):
        done(_record(c, "synthetic", float(_function(c)())))
    order = list(dict.fromkeys(f for c in checks for f in c.families if families is None or f in families))
    for family in order:
        model, tok = load_model(f"tiny-{family}")
        for c in (c for c in checks if family in c.families):
            done(_record(c, family, float(_function(c)(model, tok))))
        del model
    return rows


def read_checks(path: Path) -> dict[str, list[dict]]:
    """The records of a checks file by item; {} when the file is missing or not a checks file. The file is
    read by the bounded reader: a pipe, a device, a file too large, too deep or not UTF-8 text is refused in
    one line naming it (:class:`geosteer.readers.ReadRefused`)."""
    from geosteer.readers import read_json

    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return {}
    data = read_json(path, what="checks file")
    rows = data.get("rows") if isinstance(data, dict) else None
    out: dict[str, list[dict]] = {}
    for r in rows if isinstance(rows, list) else []:
        if isinstance(r, dict) and {"item", "check", "family", "max_abs_error", "tolerance"} <= set(r) and \
                all(isinstance(r[k], str) for k in ("check", "family")):
            out.setdefault(str(r["item"]), []).append(r)
    return out
