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


def test_the_plugin_builds_as_its_own_wheel_with_its_entry_points(tmp_path):
    """``python -m build`` (offline, no isolation) makes a geosteer-vllm wheel holding the package and the two
    entry points, and nothing of the library."""
    import shutil
    import subprocess
    import sys
    import zipfile

    source = shutil.copytree(ROOT / "vllm-plugin", tmp_path / "src",  # a build writes build/ beside its source
                             ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path),
                        str(source)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("geosteer_vllm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "geosteer_vllm/plugin.py" in names and "geosteer_vllm/cli.py" in names
    assert not any(n.startswith("geosteer/") for n in names)
    (ep,) = [n for n in names if n.endswith("entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(ep).decode()
    assert "[vllm.general_plugins]" in text and "geosteer_vllm.plugin:register" in text
    assert "[geosteer.cli]" in text and "geosteer_vllm.cli:register" in text
