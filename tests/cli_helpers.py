"""Running the ``geosteer`` command inside a test: exit code and captured output, and the one-line error check."""

from __future__ import annotations

import sys

_TREE: dict = {}


def _registrations(typer_app) -> tuple:
    """What the click tree of ``typer_app`` is built from: its registered commands and groups, recursively
    (the objects themselves: a verb or method registered since changes it)."""
    return (tuple(typer_app.registered_commands),
            tuple((g, _registrations(g.typer_instance)) for g in typer_app.registered_groups))


def geosteer_command():
    """The click tree that ``geosteer.cli.main`` runs (every CLI registered, ``build_command``), built again
    only when the registered verbs change: a build takes about half a second, and the tests run hundreds of
    commands."""
    from geosteer import cli
    from geosteer.cli.common import build_command

    cli.register_clis()  # what main() does first: methods registered since import
    key = _registrations(cli.app)
    if _TREE.get("key") != key:
        _TREE.update(key=key, command=build_command(cli.app))
    return _TREE["command"]


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``geosteer ARGS`` as ``geosteer.cli.main`` runs it (:func:`geosteer_command`, ``run_command``: the
    one-line errors, exit 2) → (exit code, stdout, stderr)."""
    from geosteer.cli.common import run_command

    monkeypatch.setattr(sys, "argv", ["geosteer", *args])
    code = 0
    try:
        run_command(geosteer_command())
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_exit_2(code: int, err: str) -> None:
    """A user error: exit code 2 and exactly one ``error: …`` line, no traceback."""
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1


class ModelBuilt(BaseException):
    """Raised by every way of building model weights once :func:`forbid_model_builds` is on (a BaseException:
    no verb can swallow it as a user error)."""


def forbid_model_builds(monkeypatch) -> None:
    """Make every model construction raise :class:`ModelBuilt`: a verb that gets there validated too late."""
    import transformers

    import geosteer
    from geosteer.models import loading, tiny
    from geosteer_paper.directional import pretrain

    def built(*a, **k):
        raise ModelBuilt

    for target, name in ((loading, "load_model"), (geosteer, "load_model"), (tiny, "tiny_model"),
                         (loading, "tiny_model"), (pretrain, "small_model"),
                         (transformers.AutoModelForCausalLM, "from_pretrained"),
                         (transformers.AutoModelForCausalLM, "from_config")):
        monkeypatch.setattr(target, name, built)


def refused_before_load(monkeypatch, capsys, *args: str) -> str:
    """Run ``geosteer ARGS`` with model builds forbidden; assert one ``error:`` line (after any ``note:`` or
    ``warning:`` lines, e.g. a deprecation pointer) and exit 2; return that line."""
    forbid_model_builds(monkeypatch)
    code, _, err = run_cli(monkeypatch, capsys, *args)
    lines = err.strip().splitlines()
    notes = [ln for ln in lines[:-1] if ln.startswith(("note: ", "warning: "))]
    one_line_exit_2(code, "\n".join(lines[len(notes):]))
    return lines[-1]


def command_leaves(root=None, *, hidden: bool = True) -> dict:
    """``"verb sub"`` -> click command of every leaf of the ``geosteer`` tree, in registration order.
    ``root``: a built tree (default: :func:`geosteer_command`, every method's CLI registered);
    ``hidden=False`` leaves out hidden commands and everything under a hidden group."""
    root = geosteer_command() if root is None else root
    leaves: dict = {}

    def walk(cmd, path: tuple[str, ...]) -> None:
        if not hidden and getattr(cmd, "hidden", False):
            return
        subs = getattr(cmd, "commands", None)  # a group (typer vendors its own click: duck-typed)
        if subs is None:
            leaves[" ".join(path)] = cmd
            return
        for name, sub in subs.items():
            walk(sub, (*path, name))

    walk(root, ())
    return leaves


def run_argv(argv, monkeypatch, capsys) -> tuple[int, str, str]:
    """:func:`run_cli` with the argument list first (the dynamics tests' call shape)."""
    return run_cli(monkeypatch, capsys, *argv)
