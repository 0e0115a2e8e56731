"""Every module that adds verbs can be imported first (before ``geosteer.cli``), and ``geosteer`` then has
every verb: a verb module imports ``geosteer.cli``, which registers the verbs while that module is half made."""

from __future__ import annotations

import subprocess
import sys

import pytest

from geosteer.cli import _CORE_CLIS

PROBE = """
import importlib, sys
importlib.import_module(sys.argv[1])
from geosteer.cli import app, main
sys.argv = ["geosteer", "--help"]
try:
    main()
except SystemExit as e:
    assert e.code == 0, e.code
print(sorted(g.name for g in app.registered_groups))
"""


@pytest.mark.parametrize("module", ["geosteer.bench.cli", "geosteer.eval.cli", "geosteer.cli.nouns"])
def test_verb_module_imported_first(module: str) -> None:
    assert module in _CORE_CLIS
    r = subprocess.run([sys.executable, "-c", PROBE, module], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "'bench'" in r.stdout  # main() added the verb whose module was half made at the first registration


@pytest.mark.parametrize("module", ["geosteer_paper.dynamics.studies.common", "geosteer_vllm.plan"])
def test_plugin_module_imported_first(module: str) -> None:
    """A module of an installed plugin imported on its own (it imports ``geosteer.cli``, whose registration
    would load the plugin's entry point while that module is half made): it imports, and ``geosteer`` then has
    the plugin's verb."""
    r = subprocess.run([sys.executable, "-c", PROBE.replace("registered_groups", "registered_groups) + sorted("
                        "c.name for c in app.registered_commands if c.name"), module],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "'study'" in r.stdout and "'serve'" in r.stdout
