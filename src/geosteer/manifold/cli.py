"""``geosteer manifold edit | import``: edit surface artifacts, import the paper's released ones. The learners
(``geosteer learn surfaces | walls | steering-surfaces``) are in :mod:`geosteer.manifold.cli_learn`,
``geosteer measure explore`` in :mod:`geosteer.manifold.cli_measure`; ``geosteer show`` describes them."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import (
    JSON_OPT,
    emit,
)
from geosteer.cli.outputs import out_artifact

man = typer.Typer(no_args_is_help=True,
                  help="Attention manifolds: learned B-spline value-modulation surfaces.")

from geosteer.manifold.cli_import import import_cmd  # noqa: E402

man.command("import")(import_cmd)

SURF_OPT = typer.Option(..., "--surfaces", "-s", help="surfaces artifact folder")
SAVE_DTYPE_HELP = "artifact storage dtype: float32 | float16"


@man.command("edit")
def edit_cmd(
    ops: list[str] = typer.Argument(..., help="edits, e.g. 'invert layer=8' 'scale=0.5 layer=8 head=3 "
                                    "dim=25' 'invert layer=8 head=2 dim=4 rows=5-10' 'set=1.5 layer=8 "
                                    "head=2 dim=4 row=5 col=5' 'wall layer=10' 'wall layer=10 top=8'"),
    surfaces: Path = SURF_OPT,
    out: Path = typer.Option(..., "--out", "-o", help="artifact folder to write (may equal --surfaces)",
                              callback=out_artifact("geosteer-surfaces")),
    save_dtype: str = typer.Option(None, "--save-dtype", help=SAVE_DTYPE_HELP + " (default: as the input)"),
    as_json: bool = JSON_OPT,
) -> None:
    """Edit surfaces (scale/invert/zero/set/wall on surfaces, heads, layers, rows/columns, top-N norms)."""
    from geosteer.manifold import load, read_config, save
    from geosteer.manifold.edit import apply_edits

    doc = read_config(surfaces)
    bank = load(surfaces)
    records = apply_edits(bank, ops)
    save(bank, out, dtype=save_dtype or doc.get("storage_dtype") or "float32")
    rows = [{"edit": r["edit"], "surfaces": r["surfaces"], "coefficients": r["coefficients"]}
            for r in records]
    if as_json:
        emit({"out": str(out), "edits": records}, True)
    else:
        emit(rows, False, table_title=f"applied to {surfaces} -> {out}")


def register(app: typer.Typer) -> None:
    """Add the ``geosteer manifold`` sub-app."""
    app.add_typer(man, name="manifold")
