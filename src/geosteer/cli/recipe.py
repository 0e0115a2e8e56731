"""``--recipe`` / ``--set`` (the front door of every verb that runs a steered model) and ``geosteer recipe``.

``--set key=value`` sets one registered recipe key on top of ``--recipe DIR|org/name[@rev]``; ``--surfaces DIR``
is ``--set surfaces=DIR``. All is checked before a model loads, in one line naming the valid keys.
"""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import JSON_OPT, emit
from geosteer.cli.outputs import out_artifact
from geosteer.errors import GeosteerError

RECIPE_HELP = "recipe to apply: a folder or a Hub repo id org/name[@revision]"
SET_HELP = "recipe key=value on top of --recipe (repeatable); `geosteer recipe show --keys` lists the keys"
SURFACES_HELP = ("surfaces artifact: a folder, a Hub repo id org/name[@revision] or a shipped name; the same as "
                 "--set surfaces=DIR")
RECIPE_OPT = typer.Option(None, "--recipe", help=RECIPE_HELP)
SET_OPT = typer.Option(None, "--set", help=SET_HELP)


def surfaces_option(note: str = ""):
    """``--surfaces DIR``: sugar for ``--set surfaces=DIR`` (``note``: what this verb does without it)."""
    return typer.Option(None, "--surfaces", help=f"{SURFACES_HELP} ({note})" if note else SURFACES_HELP)


SURFACES_OPT = surfaces_option()


def with_surfaces(settings: list[str] | None, surfaces: Path | str | None) -> list[str]:
    """``settings`` (``--set`` values) with ``--surfaces DIR`` as ``surfaces=DIR``: the one place the sugar
    is read. A ``--set surfaces=`` naming another folder is refused (one line); the same folder is kept once."""
    settings = list(settings or [])
    if surfaces is None:
        return settings
    given = [s for s in settings if s.partition("=")[0].strip() == "surfaces"]
    other = [s for s in given if not _same_folder(s.partition("=")[2].strip(), surfaces)]
    if other:
        raise GeosteerError(f"--surfaces {surfaces} and --set {other[0]} name different surfaces; give them once")
    return settings if given else [*settings, f"surfaces={surfaces}"]


def _same_folder(a: Path | str, b: Path | str) -> bool:
    """Whether two artifact references name one folder (the same text, or paths that resolve alike)."""
    if str(a) == str(b):
        return True
    pa, pb = Path(a), Path(b)
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()


def spec_from_options(recipe: str | None = None, settings: list[str] | None = None,
                      surfaces: Path | str | None = None, *, model: str | None = None, force: bool = False,
                      base_model: str | None = None):
    """The :class:`~geosteer.recipe.InterventionSpec` that ``--recipe``, ``--set`` and ``--surfaces`` name;
    with ``model`` (the ``--model`` name) its layer lists and every artifact it names are also checked against
    that model, before it loads (:func:`geosteer.cli.preflight.check_spec_artifacts`; ``force``: --force,
    ``base_model``: --base-model)."""
    from geosteer.cli.preflight import check_spec_artifacts
    from geosteer.recipe import InterventionSpec, load_recipe, parse_settings

    settings = with_surfaces(settings, surfaces)
    base = load_recipe(recipe)[0] if recipe is not None else InterventionSpec()
    spec = parse_settings(settings, base)
    if model is not None:
        _check_layer_keys(spec, model)
        check_spec_artifacts(spec, model, force=force, base_model=base_model)
    return spec


def _check_layer_keys(spec, model: str) -> None:
    """Each layer-list key of ``spec`` in the range of ``model``'s layers (its config read, no weights)."""
    from geosteer.cli.common import check_layers
    from geosteer.methods import recipe_keys

    values = spec.to_dict()
    for name, (_, key) in recipe_keys().items():
        if key.kind == "layers" and isinstance(values.get(name), str):
            check_layers(model, f"--set {name}", values[name])


recipe_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Recipes: every intervention of a run as key=value settings, saved as a folder.")


def _key_rows(spec=None) -> list[dict]:
    """One row per registered recipe key: method, kind, stock default, meaning (and ``spec``'s value)."""
    from geosteer.methods import recipe_keys

    rows = [{"key": k, "method": m.name, "kind": key.kind, "default": key.default, "help": key.help}
            for k, (m, key) in recipe_keys().items()]
    if spec is not None:
        values = spec.to_dict()
        rows = [{**r, "value": values.get(r["key"])} for r in rows]
    return rows


@recipe_app.command("show")
def show_cmd(recipe: str | None = RECIPE_OPT, settings: list[str] | None = SET_OPT,
             every: bool = typer.Option(False, "--all", help="every key, also those at the stock default"),
             keys: bool = typer.Option(False, "--keys", help="list every recipe key the registered methods "
                                       "declare (method, kind, stock default, meaning; with --recipe/--set "
                                       "also its value there)"),
             as_json: bool = JSON_OPT) -> None:
    """Print the settings that --recipe and --set give (those that differ from the stock model); --keys:
    every key there is."""
    if keys and every:
        raise GeosteerError("--keys lists every key already; give --keys or --all")
    spec = spec_from_options(recipe, settings)
    if keys:
        given = recipe is not None or bool(settings)
        emit(_key_rows(spec if given else None), as_json, table_title="recipe keys")
        return
    values = spec.to_dict() if every else spec.changed()
    if as_json:
        emit(values, True)
    elif values:
        emit(values, False)
    else:
        emit("(no settings: the stock model)", False)


@recipe_app.command("save")
def save_cmd(out: Path = typer.Argument(..., help="folder to write the recipe into",
                                      callback=out_artifact("geosteer-recipe")),
             base_model: str = typer.Option(..., "--base-model", help="the model the recipe is for "
                                            "(recorded in its config and model card)"),
             recipe: str | None = RECIPE_OPT, settings: list[str] | None = SET_OPT,
             summary: str = typer.Option("", "--summary", help="one line for the model card"),
             as_json: bool = JSON_OPT) -> None:
    """Write --recipe/--set as a self-contained recipe folder (the surfaces/gates it names are copied in)."""
    spec = spec_from_options(recipe, settings)
    folder = spec.save(out, base_model=base_model, summary=summary)
    emit({"saved": str(folder), **spec.changed()}, as_json)



def register(app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")
