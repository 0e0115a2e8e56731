"""``geosteer demo``: the CLI face of :func:`geosteer.demo.run_demo`."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MODEL_OPT, THREADS_OPT, emit, set_threads
from geosteer.cli.outputs import out_dir


def register(app: typer.Typer) -> None:
    """Add ``geosteer demo``."""

    @app.command()
    def demo(
        model: str = MODEL_OPT,
        tokens: int = typer.Option(4096, min=2, help="held-out tokens to score"),
        max_new_tokens: int = typer.Option(24, min=1),
        surfaces: Path | None = typer.Option(None, help="surfaces artifact, a folder or a Hub repo id (default "
                                             "for smollm2: the trained surfaces shipped in the package)"),
        out_dir: Path = typer.Option(Path("runs/demo"), help="where the HTML report goes (written when surfaces are "
                                                       "attached)", callback=out_dir()),
        threads: int = THREADS_OPT,
        device: str = DEVICE_OPT,
        dtype: str = DTYPE_OPT,
        as_json: bool = JSON_OPT,
    ) -> None:
        """The main job: perplexity, generation, and (with surfaces) steering edits + an HTML report."""
        from geosteer.demo import run_demo

        if surfaces is not None:
            from geosteer.manifold import read_config

            read_config(surfaces)  # a missing or foreign artifact is refused before the model loads
        set_threads(threads)
        summary = run_demo(model, tokens, max_new_tokens, surfaces, out_dir, device=device, dtype=dtype)
        if as_json:
            emit(summary, True)
