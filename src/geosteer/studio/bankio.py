"""The studio's only contact with ``geosteer.manifold``: open/attach/read/save a bank, and sensitivity.

Sensitivity of a surface (the ranking the studio offers besides ‖C‖): the first-order change of the
top next-token log-probability when the surface is zeroed, |⟨∂ log p_top / ∂C_d, C_d⟩| — one backward
pass scores every surface (a linearisation of the paper's ablation ranking, §5).
"""

from __future__ import annotations

from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.eval.generation import prompt_ids
from geosteer.formats import CONFIG_NAME, format_of
from geosteer.methods import is_artifact as _is_artifact
from geosteer.models.loading import input_device

FORMAT = "geosteer-surfaces"  # the artifact kind the studio opens and saves


def is_artifact(path: Path) -> bool:
    """A surfaces artifact folder (config of that format and its tensor file): what the studio opens."""

    return _is_artifact(path, "geosteer-surfaces")


def config_problem(path: Path) -> str | None:
    """Why ``path`` (a folder with a config) is not a surfaces artifact the studio can read, or None. Other
    geosteer formats (gates, recipes) are not problems: the studio just does not open them."""

    name = format_of(path)
    if name is not None and name != "geosteer-surfaces":
        return None
    if name is None:
        return f"{CONFIG_NAME} is not a readable geosteer config"
    import geosteer.manifold as M

    try:
        M.read_config(path)
    except GeosteerError as e:
        return str(e).replace(str(path), path.name)
    return None


def open_bank(model, surfaces: Path | None, force: bool = False):
    """The bank to edit, attached to ``model`` persistently: loaded from ``surfaces`` or fresh zeros.
    ``force``: accept an artifact recorded for another base model (shapes must still fit)."""
    import geosteer.manifold as M

    if surfaces is None:
        return M.install(model)
    return M.install(model, bank=M.load(surfaces, model=model, force=force))


def read(model, path: Path):
    """Load ``path`` as a bank checked against ``model`` (shapes, and what the loader checks), unattached."""
    import geosteer.manifold as M

    return M.load(path, model=model)


def save(bank, folder: Path) -> None:
    """Atomic save (the artifact writer builds a temporary sibling folder and renames it into place)."""
    import geosteer.manifold as M

    M.save(bank, folder)


def sensitivity(model, tok, bank, prompt: str) -> torch.Tensor:
    """|⟨∇_C log p_top, C⟩| per surface: (bank layers, heads, dims)."""

    ids = prompt_ids(tok, prompt).to(input_device(model))
    c = bank.coefficients
    was = c.requires_grad
    c.requires_grad_(True)
    try:
        with torch.enable_grad():
            logp = torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0, -1].float(), -1)
            (g,) = torch.autograd.grad(logp[logp.argmax()], c)
    finally:
        c.requires_grad_(was)
    return (g.detach() * c.detach()).flatten(-2).sum(-1).abs()
