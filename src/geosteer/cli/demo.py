"""``geosteer demo``: the CLI face of :func:`geosteer.demo.run_demo`."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MODEL_OPT, THREADS_OPT, emit, set_threads
from geosteer.cli.outputs import out_dir
from geosteer.cli.recipe import RECIPE_OPT, SET_OPT, spec_from_options, surfaces_option


def register(app: typer.Typer) -> None:
    """Add ``geosteer demo``."""

    @app.command()
    def demo(
        model: str = MODEL_OPT,
        tokens: int = typer.Option(4096, min=2, help="held-out tokens to score"),
        max_new_tokens: int = typer.Option(24, min=1),
        surfaces: Path | None = surfaces_option("default for smollm2 when no steering is given: the trained "
                                                "surfaces shipped in the package"),
        recipe: str | None = RECIPE_OPT,
        settings: list[str] | None = SET_OPT,
        out_dir: Path = typer.Option(Path("runs/demo"), help="where the HTML report goes (written when surfaces are "
                                                       "attached)", callback=out_dir()),
        threads: int = THREADS_OPT,
        device: str = DEVICE_OPT,
        dtype: str = DTYPE_OPT,
        as_json: bool = JSON_OPT,
    ) -> None:
        """The main job: perplexity, generation, and, steered (--recipe/--set/--surfaces; with surfaces:
        steering edits + an HTML report), the same against the stock model."""
        from geosteer.demo import run_demo

        spec = spec_from_options(recipe, settings, surfaces, model=model)  # a bad value: one line, before the load
        if spec.surfaces is not None:
            from geosteer.manifold import read_config

            read_config(spec.surfaces)  # a missing or foreign artifact is refused before the model loads
        set_threads(threads)
        summary = run_demo(model, tokens, max_new_tokens, None, out_dir, device=device, dtype=dtype, spec=spec)
        if as_json:
            emit(summary, True)
