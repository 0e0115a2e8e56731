"""``geosteer.load`` loads every artifact kind in a fresh process, with nothing imported first but
``geosteer``: the format table is filled by the registry, never by an import a user happened to make."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

FRESH = """
import sys
import geosteer
for folder in sys.argv[1:]:
    obj = geosteer.load(folder)
    print(type(obj).__module__ + "." + type(obj).__name__, len(getattr(obj, "walls", ())))
"""

# the recipe through the registry's dispatch first, in a process that imported nothing else: the format
# table is filled before a format is looked up
FRESH_RECIPE = """
import sys
from geosteer.methods import load_artifact
print(type(load_artifact(sys.argv[1])).__name__)
import geosteer
print(geosteer.load(sys.argv[1]).scale_site)
"""


@pytest.fixture(scope="module")
def artifacts(tiny_model, tmp_path_factory) -> dict[str, Path]:
    import geosteer.manifold as M
    from geosteer.dynamics.gates import FFNGates
    from geosteer.manifold.walls import Wall
    from geosteer.recipe import InterventionSpec

    d = tmp_path_factory.mktemp("kinds")
    model, _ = tiny_model("llama")
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))
    M.uninstall(model)
    out = {"surfaces": M.save(bank, d / "surfaces")}
    bank.set_walls([Wall(layer=1, heads=(0,), dims=(1, 2), q=(0.5, 9.0))])
    out["walls"] = M.save(bank, d / "walls")
    gates = FFNGates.for_model(model)
    with torch.no_grad():
        gates.alpha.copy_(torch.tensor([0.5, 1.5, 0.0]))
    out["gates"] = gates.save(d / "gates")
    from geosteer.vectors import SteeringVectors

    sv = SteeringVectors({1: torch.linspace(-1, 1, model.config.hidden_size)}, point="resid_post",
                         base_model="tiny-llama", model_type=model.config.model_type, d_model=model.config.hidden_size,
                         n_layers=model.config.num_hidden_layers)
    out["vectors"] = sv.save(d / "vectors")
    spec = InterventionSpec(scale_site="attn_out", scale_par=0.0, gates=str(out["gates"]))
    out["recipe"] = spec.save(d / "recipe", base_model="tiny-llama")
    return out


def test_every_kind_in_a_fresh_process(artifacts):
    """One fresh interpreter per kind (started together: the imports dominate), each importing only geosteer
    (the recipe: only geosteer.artifacts, the case that once failed)."""
    runs = {"surfaces": (FRESH, artifacts["surfaces"], artifacts["walls"]), "gates": (FRESH, artifacts["gates"]),
            "vectors": (FRESH, artifacts["vectors"]), "recipe": (FRESH_RECIPE, artifacts["recipe"])}
    procs = {kind: subprocess.Popen([sys.executable, "-c", script, *map(str, folders)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for kind, (script, *folders) in runs.items()}
    out = {}
    for kind, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{kind}: {stderr[-2000:]}"
        out[kind] = stdout.splitlines()
    assert out == {"surfaces": ["geosteer.manifold.bank.SurfaceBank 0", "geosteer.manifold.bank.SurfaceBank 1"],
                   "gates": ["geosteer.dynamics.gates.FFNGates 0"],
                   "vectors": ["geosteer.vectors.apply.SteeringVectors 0"],  # a method package's own format
                   "recipe": ["InterventionSpec", "attn_out"]}


def test_load_returns_what_was_saved(artifacts, tiny_model):
    import geosteer
    from geosteer.recipe import InterventionSpec

    model, _ = tiny_model("llama")
    spec = geosteer.load(artifacts["recipe"], model=model)
    assert isinstance(spec, InterventionSpec) and spec.scale_par == 0.0 and spec.scale_site == "attn_out"
    assert Path(spec.gates) == artifacts["recipe"] / "gates"  # copied into the recipe, resolved inside it
    gates = geosteer.load(artifacts["gates"], model=model)
    assert gates.alpha.tolist() == [0.5, 1.5, 0.0]


def test_a_plugin_format_is_found_by_load(tmp_path):
    import json

    import geosteer
    from geosteer.methods import ArtifactFormat, Method, register_method, unregister_method

    fmt = ArtifactFormat("geosteer-plugin-probe", 1, known_keys=("value",),
                         load=lambda folder, model: json.loads((folder / "geosteer_config.json").read_text())["value"])
    register_method(Method("plugin_probe", artifacts=(fmt,)))
    try:
        (tmp_path / "p").mkdir()
        (tmp_path / "p" / "geosteer_config.json").write_text(json.dumps({**fmt.header(), "value": 41}))
        assert geosteer.load(tmp_path / "p") == 41
    finally:
        unregister_method("plugin_probe")
    with pytest.raises(geosteer.GeosteerError, match="no loader for format 'geosteer-plugin-probe'"):
        geosteer.load(tmp_path / "p")


def test_every_artifact_object_saves_and_pushes(artifacts, tiny_model, tmp_path, monkeypatch):
    """``obj.save(folder)`` and ``obj.push_to_hub(repo)`` on surfaces, gates and a recipe: the folder (and what
    would be uploaded) loads back through ``geosteer.load`` to the same numbers."""
    import huggingface_hub

    import geosteer
    from tests.hub_helpers import fake_hf_api

    model, _ = tiny_model("llama")
    objs = {k: geosteer.load(artifacts[k], model=model) for k in ("walls", "gates", "recipe")}

    def same(kind, a, b):
        if kind == "walls":
            return torch.equal(a.coefficients, b.coefficients) and len(a.walls) == len(b.walls) == 1
        if kind == "gates":
            return torch.equal(a.alpha, b.alpha)
        plain = {k: v for k, v in a.changed().items() if k != "gates"}
        return (plain == {k: v for k, v in b.changed().items() if k != "gates"} and Path(a.gates) != Path(b.gates)
                and same("gates", geosteer.load(a.gates), geosteer.load(b.gates)))  # copied in, same numbers

    for kind, obj in objs.items():
        saved = obj.save(tmp_path / f"saved-{kind}", **({"base_model": "tiny-llama"} if kind == "recipe" else {}))
        assert same(kind, geosteer.load(saved, model=model), obj), kind
        calls: dict = {}
        monkeypatch.setattr(huggingface_hub, "HfApi", fake_hf_api(calls, tmp_path / f"up-{kind}"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # pushing is refused offline; the recorder is local
        url = obj.push_to_hub(f"someorg/{kind}", token="t",
                              **({"base_model": "tiny-llama"} if kind == "recipe" else {}))
        assert url == f"https://huggingface.co/someorg/{kind}" and calls["repo"] == (f"someorg/{kind}", True)
        assert same(kind, geosteer.load(tmp_path / f"up-{kind}", model=model), obj), kind
