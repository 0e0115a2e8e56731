"""An option that takes one value, given twice, is refused in one line (click would keep the last silently);
repeatable options (``--prompt`` of ``generate``, ``--set``) take every value. A flag given twice is fine; a flag
and its opposite (``--greedy --sample``) are refused."""

from __future__ import annotations

from typer.core import TyperCommand

from geosteer.errors import GeosteerError


def _option_table(command) -> dict[str, object]:
    """Every option string of ``command`` -> its option (duck-typed: typer vendors its own click)."""
    table: dict[str, object] = {}
    for param in getattr(command, "params", []):
        if getattr(param, "param_type_name", "") == "option":
            for opt in (*param.opts, *getattr(param, "secondary_opts", ())):
                table[opt] = param
    return table


def repeated_option(command, args: list[str]) -> str | None:
    """The one-line complaint about the first one-value option of ``command`` that ``args`` give twice."""
    table = _option_table(command)
    used: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        name, attached = (arg.split("=", 1)[0], "=" in arg) if arg.startswith("--") else (arg, False)
        if name not in table and arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            name, attached = arg[:2], True  # a short option with its value attached (-pText)
        param = table.get(name)
        if param is not None:
            used.setdefault(param.name, []).append(name)
            if not (param.is_flag or param.count or attached):
                i += max(1, param.nargs)
        i += 1
    for pname, names in used.items():
        param = next(p for p in command.params if p.name == pname)
        if len(names) < 2 or param.multiple or param.count:
            continue
        if param.is_flag and len(set(names)) == 1:
            continue  # the same switch twice says the same thing
        shown = " and ".join(dict.fromkeys(names))
        return (f"{shown} given {len(names)} times; {names[0]} takes one value: give it once"
                if not param.is_flag else f"{shown} contradict each other; give one")
    return None


class OnceCommand(TyperCommand):
    """A typer command that refuses a one-value option given twice (:func:`repeated_option`)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if not ctx.ignore_unknown_options:
            msg = repeated_option(self, list(args))
            if msg is not None:
                raise GeosteerError(msg)
        return super().parse_args(ctx, args)


def refuse_repeats(app) -> None:
    """Make every command of the typer ``app`` (and of its groups) an :class:`OnceCommand` unless it has a class
    of its own."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = OnceCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            refuse_repeats(group.typer_instance)
