"""No verb writes into the package's repository unless told to: no option of any ``geosteer`` verb has a
default under ``docs/`` (results land in the current directory, or where ``--out`` says)."""

from __future__ import annotations

from pathlib import Path

from tests.cli_helpers import command_leaves


def test_no_option_defaults_into_the_repository():
    leaves = list(command_leaves().items())
    assert len(leaves) > 30  # the walk reaches the verbs of every method
    bad = []
    for path, cmd in leaves:
        for p in cmd.params:
            d = p.default
            if isinstance(d, (str, Path)) and Path(str(d)).parts[:1] in (("docs",), ("src",), ("studies",)):
                bad.append(f"geosteer {path} {p.opts[0]} = {d}")
    assert not bad, "options that default into the repository: " + "; ".join(bad)
    outs = {path: p.default for path, cmd in leaves for p in cmd.params if "--out" in p.opts}
    assert outs["study directional sweep"] == Path("sweep.json")
    assert outs["study directional heads"] == Path("heads.json")
