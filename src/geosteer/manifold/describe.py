"""What a surfaces artifact holds (``geosteer show``): base model, shapes, grid, ranges, training, walls,
edit history and the largest surfaces."""

from __future__ import annotations

from pathlib import Path

from geosteer.manifold.artifact import load, read_config
from geosteer.manifold.explore import top_surfaces
from geosteer.manifold.surface_checks import format_layers

TOP = 5  # largest surfaces listed


def _ranges(bank) -> str:
    pairs = sorted({(round(float(a), 4), round(float(b), 4)) for a, b in zip(bank.lo, bank.hi, strict=True)})
    if len(pairs) == 1:
        return f"[{pairs[0][0]:g}, {pairs[0][1]:g}] (all layers)"
    return f"per layer, {min(p[0] for p in pairs):g}…{max(p[1] for p in pairs):g}"


def _ppl(training: dict) -> str | None:
    h = training.get("heldout") or {}
    if h.get("ppl_before") is None:
        return None
    return f"{h['ppl_before']:.4g} -> {h['ppl_after']:.4g}"


def describe_surfaces(ref: str | Path) -> dict:
    """The surfaces artifact at ``ref`` in JSON-able form (reads only)."""
    doc = read_config(ref)
    bank = load(ref)
    training = (doc.get("meta") or {}).get("training") or {}
    return {
        "base_model": doc.get("base_model"), "shape": doc.get("shape"), "grid_size": doc.get("grid_size"),
        "layers": format_layers(bank.layers), "ranges": _ranges(bank), "parameters": bank.n_parameters(),
        "storage_dtype": doc.get("storage_dtype"), "training_tokens": training.get("tokens"),
        "heldout_ppl": _ppl(training), "edits": len(bank.history), "walls": len(bank.walls),
        "created": doc.get("created"), "commit": doc.get("commit"),
        "wall_regions": [w.to_dict() for w in bank.walls], "history": bank.history,
        "top_surfaces": top_surfaces(bank, TOP),
    }
