"""The example notebooks (examples/*.ipynb) run top to bottom on a tiny random model.

Each notebook is executed in a fresh kernel (nbclient) with its default ``MODEL = "tiny-llama"``; the test
asserts that every code cell ran without an error and that the notebooks promising figures display at
least one plotly figure. The stored notebooks carry no outputs, so what is checked is what a reader runs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the dev extra (nbformat, nbclient, ipykernel)")
nbclient = pytest.importorskip("nbclient", reason="needs the dev extra (nbformat, nbclient, ipykernel)")
pytest.importorskip("ipykernel", reason="needs the dev extra (nbformat, nbclient, ipykernel)")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
# notebook -> the least number of figures it must display
NOTEBOOKS = {
    "01_steer_and_compare.ipynb": 1,
    "02_surfaces_train_plot_edit.ipynb": 6,  # loss, norms, heatmap, terrain, control net, edited, sensitivity
    "03_directional_and_dynamics.ipynb": 4,
}


def test_every_example_notebook_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_is_stored_clean_with_a_model_variable(name):
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "store notebooks without outputs"
    # the model comes from one cell variable, defaulting to the tiny random model
    assert re.search(r'^MODEL = "tiny-llama"', code[0].source, flags=re.M), code[0].source
    assert all("load_model(MODEL)" in c.source or "load_model(" not in c.source for c in code)
    assert "smollm2" in code[0].source  # the cell says what to set for real results


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_runs(name, tmp_path):
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the cell on the first error
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "a cell did not run"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    figures = [o for c in code for o in c.outputs
               if o.output_type in ("display_data", "execute_result") and PLOTLY_MIME in o.data]
    assert len(figures) >= NOTEBOOKS[name], f"{len(figures)} figures displayed"
    for f in figures:  # a figure with data in it, not an empty canvas
        spec = f.data[PLOTLY_MIME]
        spec = json.loads(spec) if isinstance(spec, str) else spec
        assert spec["data"], "an empty figure"


def test_notebooks_are_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed")
    out = subprocess.run([ruff, "check", str(EXAMPLES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
