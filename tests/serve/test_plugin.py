"""The plugin package (vllm-plugin/, geosteer-vllm): its entry points are declared by it, not by the library,
and each names a function that imports without vLLM."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_the_plugin_declares_the_vllm_and_cli_entry_points_and_they_resolve():
    declared = tomllib.loads((ROOT / "vllm-plugin" / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["vllm.general_plugins"] == {"geosteer": "geosteer_vllm.plugin:register"}
    assert declared["geosteer.cli"] == {"serve": "geosteer_vllm.cli:register"}
    for group in declared.values():
        for value in group.values():
            module, name = value.split(":")
            assert callable(getattr(importlib.import_module(module), name))


def test_the_library_loads_nothing_into_vllm_and_does_not_depend_on_it():
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "vllm.general_plugins" not in core.get("entry-points", {})
    extras = [r for reqs in core["optional-dependencies"].values() for r in reqs]
    assert not any(r.startswith(("vllm", "geosteer-vllm")) for r in core["dependencies"] + extras)
    installed = {ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert "geosteer.serve.plugin:register" not in installed
    assert not (ROOT / "src" / "geosteer" / "serve").exists()
