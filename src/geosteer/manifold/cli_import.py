"""``geosteer manifold import FILE -m MODEL --out DIR``: the paper's released surfaces as a surfaces artifact."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, THREADS_OPT, emit, model_config
from geosteer.cli.common import load as load_model
from geosteer.cli.outputs import out_artifact


def import_cmd(
    file: Path = typer.Argument(..., help="the released checkpoint, e.g. surfaces_grid8.pt (read with "
                                "torch.load(weights_only=True))"),
    model: str = typer.Option(..., "--model", "-m", help="the base model the surfaces were trained on"),
    out: Path = typer.Option(..., "--out", "-o", help="surfaces artifact folder to write",
                             callback=out_artifact("geosteer-surfaces")),
    grid: int = typer.Option(None, "--grid", min=1, max=128,
                             help="expected grid intervals (default: the file's, else K - 3 of its control nets)"),
    grid_range: tuple[float, float] = typer.Option(None, "--range", help="grid range LO HI (default: the file's, "
                                                   "else -4 4)"),
    save_dtype: str = typer.Option("float32", "--save-dtype", help="artifact storage dtype: float32 | float16"),
    force: bool = typer.Option(False, "--force", help="write the artifact even if its probe forward is not finite"),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Import the attention-manifold paper's released surfaces (per layer, per query head × head_dim control
    nets) as a surfaces artifact for --model; shapes are checked against the model before it loads."""
    from geosteer.errors import GeosteerError
    from geosteer.manifold.artifact import save
    from geosteer.manifold.importer import choose_range, fit_released, model_shape, read_released, to_bank

    if save_dtype not in ("float32", "float16", "bfloat16"):
        raise GeosteerError(f"--save-dtype must be float32, float16 or bfloat16 (got {save_dtype})")
    grid_range = tuple(grid_range) if grid_range else None
    rel = read_released(file)
    choose_range(rel, grid_range)
    shape = model_shape(model_config(model))
    if shape is not None:  # everything the file can be checked against without weights
        fit_released(rel, grid_size=grid, **shape)
    m, _ = load_model(model, threads=threads, device=device, dtype=dtype)
    bank = to_bank(rel, m, grid_size=grid, grid_range=grid_range)
    bank.check_model(m)
    if not force:
        from geosteer.overflow import check_forward_finite

        check_forward_finite(m, bank, f"surfaces imported from {file}")
    src = bank.meta["source"]
    command = "geosteer manifold import " + " ".join(shlex.quote(a) for a in _args())
    bank.meta["command"] = command
    folder = save(bank, out, dtype=save_dtype)
    _card_source(folder, src)
    summary = {"out": str(folder), "file": str(file), "layout": src["layout"], "layers": len(bank.layers),
               "heads": bank.n_heads, "head_dim": bank.head_dim, "grid": bank.grid_size,
               "grid_range": src["grid_range"], "grid_range_from": src["grid_range_from"],
               "parameters": bank.n_parameters()}
    emit(summary, as_json)
    if src["grid_range_from"].startswith("assumed") and not as_json:
        typer.echo("note: the file records no grid range; [-4, 4] was used (pass --range LO HI if the surfaces "
                   "were trained on another)", err=True)


def _args() -> list[str]:
    args = sys.argv[1:]
    return args[args.index("import") + 1:] if "import" in args[:3] else args


def _card_source(folder: Path, src: dict) -> None:
    """Add where the surfaces came from to the artifact's README.md (documentation only)."""
    from geosteer.io_utils import atomic_write_text

    card = folder / "README.md"
    if not card.is_file():
        return
    lines = ["", "## Source", "",
             f"Imported with `geosteer manifold import` from `{Path(src['file']).name}` ({src['layout']} layout; "
             f"tensors such as `{src['keys'][0]}`): layers {src['layers'][0]}–{src['layers'][-1]} "
             f"({len(src['layers'])}), grid {src['grid']}, grid range [{src['grid_range'][0]:g}, "
             f"{src['grid_range'][1]:g}] ({src['grid_range_from']}). The coefficients are the file's, unchanged; "
             "nothing was trained here.", ""]
    atomic_write_text(card, card.read_text(encoding="utf-8").rstrip("\n") + "\n" + "\n".join(lines))
