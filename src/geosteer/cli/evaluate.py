"""``geosteer eval``: lm-evaluation-harness's own command line with ``--model geosteer`` registered (lm-eval
has no plugin entry point); ``--recipe``, ``--set key=value`` and ``--surfaces`` become ``--model_args``.
"""

from __future__ import annotations

import typer

_HELP = ("lm-evaluation-harness with `--model geosteer` registered: every argument goes to lm-eval "
         "(`geosteer eval --help` prints lm-eval's options), except --recipe DIR, --set key=value and --surfaces "
         "DIR, which steer the geosteer model (its --model_args). Needs the eval extra.")
_FRONT_DOOR = {"--recipe": "recipe", "--set": None, "--surfaces": "surfaces"}


def eval_(ctx: typer.Context) -> None:
    from geosteer.extras import require

    require("lm_eval")
    from geosteer.integrations.lm_eval import main

    args = _front_door(list(ctx.args))
    _check_geosteer_model_args(args)  # before lm-eval reads its task index or any model loads
    if not args or args in (["-h"], ["--help"]):
        typer.echo("geosteer eval = lm-eval's command line with `--model geosteer` registered; "
                   "lm-eval's own help (`run`, its default subcommand) follows.\n")
        args = ["run", "--help"]
    main(args)


def register(app: typer.Typer) -> None:
    """Add ``geosteer eval``."""
    app.command("eval", help=_HELP, add_help_option=False,
                context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(eval_)


def _front_door(args: list[str]) -> list[str]:
    """``args`` with ``--recipe``/``--set``/``--surfaces`` turned into ``--model_args`` of ``--model geosteer``
    (added when no ``--model`` is given; another model is refused). ``--surfaces DIR`` is ``--set surfaces=DIR``
    (:func:`geosteer.cli.recipe.with_surfaces`, as on every other verb); a repeated ``--recipe`` or
    ``--surfaces``: the last one, as click reads it."""
    from geosteer.cli.recipe import with_surfaces
    from geosteer.errors import GeosteerError

    rest: list[str] = []
    given: dict[str, list[str]] = {name: [] for name in _FRONT_DOOR}
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name not in _FRONT_DOOR:
            rest.append(args[i])
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                raise GeosteerError(f"{name} needs a value")
            value, i = args[i + 1], i + 1
        if "," in value:
            raise GeosteerError(f"{name} {value}: no ',' in a value here (lm-eval splits model_args at commas; "
                                "layer lists take ';', e.g. 0;2;5-7)")
        if name == "--set" and "=" not in value:
            raise GeosteerError(f"--set {value!r}: expected key=value")
        given[name].append(value)
        i += 1
    recipe, surfaces = (given[n][-1] if given[n] else None for n in ("--recipe", "--surfaces"))
    extra = [*([f"recipe={recipe}"] if recipe is not None else []), *with_surfaces(given["--set"], surfaces)]
    if not extra:
        return rest
    model = _option_values(rest, ("--model",))
    if model and model[-1] != "geosteer":
        raise GeosteerError(f"--recipe/--set/--surfaces steer --model geosteer, not --model {model[-1]}")
    return [*rest, *([] if model else ["--model", "geosteer"]), "--model_args", *extra]


def _option_values(args: list[str], names: tuple[str, ...]) -> list[str] | None:
    """The values given to an lm-eval option (``--opt a b``, ``--opt=a``); None when it is absent."""
    out: list[str] | None = None
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name in names:
            out = [] if out is None else out
            if eq:
                out.append(value)
            else:
                while i + 1 < len(args) and not args[i + 1].startswith("-"):
                    i += 1
                    out.append(args[i])
        i += 1
    return out


def _check_geosteer_model_args(args: list[str]) -> None:
    """With ``--model geosteer``, check its ``--model_args`` (keys, pretrained, dtype, recipe values) first."""
    model = _option_values(args, ("--model",))
    if not model or model[-1] != "geosteer":
        return
    from lm_eval.utils import simple_parse_args_string

    from geosteer.integrations.lm_eval import check_model_args
    from geosteer.recipe import InterventionSpec

    given: dict = {}
    for chunk in _option_values(args, ("--model_args", "-a")) or []:
        if chunk.lstrip().startswith("{"):
            return  # a JSON object: lm-eval parses it; the model checks it before loading
        given.update(simple_parse_args_string(chunk))
    check_model_args(given)
    InterventionSpec.pop_from(dict(given))  # recipe values in their kinds (one line each)
