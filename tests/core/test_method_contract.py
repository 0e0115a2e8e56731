"""The method contract, run on every registered method (PEFT's ``testing_common`` idea) and on a toy fifth
method from a test package (tests/core/toy_method) that touches nothing in ``src/``.

Each method declares ``examples(model, folder) -> {"neutral": values, "active": values}``
(:class:`geosteer.methods.Method`); the suite checks, per method: stock at its defaults; the neutral values
attach something and give the stock logits; the active values change them, survive a save/load round trip of
their artifacts (through the format's writer and ``geosteer.load``) and of a recipe (``geosteer.load`` of the
recipe folder is itself an intervention), also in a fresh process; and all methods compose in one recipe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import geosteer
from geosteer.interventions import steer
from geosteer.methods import methods, unregister_method
from geosteer.recipe import InterventionSpec, save_recipe
from tests.conftest import TINY_FAMILIES

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = ["manifold", "directional", "dynamics", "vectors", "loreft"]
FAMILIES = ["llama", "qwen3", "gpt2"]  # test_neutral.py covers every family for the core hooks


@pytest.fixture
def toy():
    from tests.core import toy_method

    yield toy_method.register()
    unregister_method("toy")


@pytest.fixture(params=[*BUILTIN, "toy"])
def method(request):
    if request.param == "toy":
        request.getfixturevalue("toy")
    return methods()[request.param]


def _examples(method, model, folder: Path) -> dict:
    assert method.examples is not None, f"method {method.name} declares no examples for the contract suite"
    folder.mkdir(parents=True, exist_ok=True)
    return method.examples(model, folder)


def _ids(tok) -> torch.Tensor:
    return tok(["The cat sat on the mat because it was warm and"], return_tensors="pt").input_ids


def _logits(model, ids, *ivs) -> torch.Tensor:
    with torch.no_grad(), steer(model, *ivs):
        return model(input_ids=ids).logits


def test_every_builtin_method_is_in_the_suite():
    assert list(methods())[: len(BUILTIN)] == BUILTIN


def _suite() -> list:
    """The methods under test: the built-ins and the toy (other tests may register throwaway ones)."""
    return [m for name, m in methods().items() if name in (*BUILTIN, "toy")]


def test_stock_at_its_defaults(method, tiny_model):
    model, _ = tiny_model("llama")
    assert method.build(model, method.defaults()) == []
    assert InterventionSpec().build(model) == [] and InterventionSpec().changed() == {}


@pytest.mark.parametrize("family", FAMILIES)
def test_neutral_values_give_the_stock_logits(method, tiny_model, tmp_path, family):
    model, tok = tiny_model(family)
    values = _examples(method, model, tmp_path)["neutral"]
    spec = InterventionSpec(**values)
    assert spec.build(model), f"{method.name}: the neutral example attaches nothing, so it tests nothing"
    ids = _ids(tok)
    stock = _logits(model, ids)
    torch.testing.assert_close(_logits(model, ids, spec), stock, rtol=0, atol=2e-5)
    assert torch.equal(_logits(model, ids), stock)  # removed cleanly


#: each built-in's learned object and its one strength key (s = 0: the stock model, s = 1: as trained)
STRENGTHS = {"manifold": ("surfaces", "surfaces_strength"), "directional": ("scale_learned", "scale_learned_strength"),
             "dynamics": ("gates", "gates_strength"), "vectors": ("vectors", "vector_scale"),
             "loreft": ("loreft", "loreft_strength")}


def test_every_strength_key_is_a_number_defaulting_to_1():
    for name, (folder, strength) in STRENGTHS.items():
        keys = {k.name: k for k in methods()[name].keys}
        assert keys[folder].kind == "folder" and keys[strength].kind == "number" and keys[strength].default == 1.0


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize("name", list(STRENGTHS))
def test_strength_0_is_the_stock_model_and_1_the_artifact(name, tiny_model, tmp_path, family):
    """The active example's learned object alone: strength 0 attaches nothing and gives the stock logits
    exactly; strength 1 gives the logits of the artifact without the key, bit for bit."""
    model, tok = tiny_model(family)
    folder, strength = STRENGTHS[name]
    artifact = {folder: _examples(methods()[name], model, tmp_path)["active"][folder]}
    ids = _ids(tok)
    stock = _logits(model, ids)
    assert InterventionSpec(**artifact, **{strength: 0.0}).build(model) == []
    assert torch.equal(_logits(model, ids, InterventionSpec(**artifact, **{strength: 0.0})), stock)
    plain = _logits(model, ids, InterventionSpec(**artifact))
    assert (plain - stock).abs().max() > 1e-4, f"{name}: the learned object changes nothing"
    assert torch.equal(_logits(model, ids, InterventionSpec(**artifact, **{strength: 1.0})), plain)


def test_artifacts_and_recipe_round_trip(method, tiny_model, tmp_path):
    from geosteer.methods import load_artifact, save_artifact

    model, tok = tiny_model("llama")
    values = _examples(method, model, tmp_path / "ex")["active"]
    ids = _ids(tok)
    built = InterventionSpec(**values).build(model)
    want = _logits(model, ids, *built)
    assert (want - _logits(model, ids)).abs().max() > 1e-3, f"{method.name}: the active example changes nothing"
    folders = [v for k, v in values.items() if any(key.name == k and key.kind == "folder" for key in method.keys)]
    for i, folder in enumerate(folders):  # each artifact: load, write again through its format, load again
        obj = load_artifact(folder, model)
        again = load_artifact(save_artifact(obj, tmp_path / f"again{i}"), model)
        torch.testing.assert_close(_logits(model, ids, again), _logits(model, ids, obj), rtol=0, atol=0)
    recipe = save_recipe(tmp_path / "recipe", InterventionSpec(**values), base_model="tiny-llama")
    loaded = geosteer.load(recipe, model=model)
    torch.testing.assert_close(_logits(model, ids, loaded), want, rtol=0, atol=0)  # a recipe is an intervention


def test_all_methods_compose_in_one_recipe(toy, tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    values: dict = {}
    for m in _suite():
        values.update(_examples(m, model, tmp_path / m.name)["active"])
    spec = InterventionSpec(**values)
    ivs = spec.build(model)
    per_method = [iv for m in methods().values() for iv in m.build(model, spec.section(m))]
    assert [type(iv).__name__ for iv in ivs] == [type(iv).__name__ for iv in per_method]
    assert {m.name for m in _suite()} == {*BUILTIN, "toy"}
    ids = _ids(tok)
    stock = _logits(model, ids)
    together = _logits(model, ids, spec)
    torch.testing.assert_close(together, _logits(model, ids, *per_method), rtol=0, atol=0)
    for m in _suite():  # each method on its own differs from all of them together
        alone = InterventionSpec(**_examples(m, model, tmp_path / f"alone-{m.name}")["active"])
        assert (_logits(model, ids, alone) - together).abs().max() > 1e-4, m.name
    saved = save_recipe(tmp_path / "all", spec, base_model="tiny-llama")
    torch.testing.assert_close(_logits(model, ids, geosteer.load(saved, model=model)), together, rtol=0, atol=0)
    assert torch.equal(_logits(model, ids), stock)


def test_a_failing_attach_detaches_what_the_recipe_attached(tiny_model, monkeypatch):
    from geosteer.interventions import ScaleHook

    model, tok = tiny_model("llama")
    ids = _ids(tok)
    stock = _logits(model, ids)
    monkeypatch.setattr(InterventionSpec, "build", lambda self, model, force=False: [
        ScaleHook("attn_out", 0.5, [0]), ScaleHook("attn_out", 0.5, [999])])
    with pytest.raises(geosteer.errors.GeosteerError, match="999"):
        InterventionSpec().attach(model)
    assert torch.equal(_logits(model, ids), stock)


# -- the toy plugin in a fresh process, registered through the geosteer.methods entry-point group -------------
FRESH = """
import json, sys
from pathlib import Path
import torch
import geosteer
from geosteer.methods import methods
assert "toy" in methods(), list(methods())
model, tok = geosteer.load_model("tiny-llama")
ids = tok(["The cat sat on the mat because it was warm and"], return_tensors="pt").input_ids
mode, folder = sys.argv[1], Path(sys.argv[2])
if mode == "save":
    values = methods()["toy"].examples(model, folder / "ex")["active"]
    from geosteer.recipe import InterventionSpec
    InterventionSpec(**values).save(folder / "recipe", base_model="tiny-llama")
with torch.no_grad(), geosteer.steer(model, geosteer.load(folder / "recipe", model=model)):
    print(json.dumps(model(input_ids=ids).logits[0, -1, :8].tolist()))
"""


def _plugin_dist(tmp: Path) -> Path:
    """An installed distribution's metadata declaring the toy method's entry point (what pip would write)."""
    info = tmp / "site" / "geosteer_toy_method-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: geosteer-toy-method\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[geosteer.methods]\ntoy = tests.core.toy_method\n")
    return tmp / "site"


def test_the_toy_plugin_saves_and_loads_in_fresh_processes(tmp_path, tiny_model):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_plugin_dist(tmp_path)), str(ROOT)]),
           "OMP_NUM_THREADS": "1", "GEOSTEER_PROGRESS": "0"}

    def run(mode: str) -> list[float]:
        out = subprocess.run([sys.executable, "-c", FRESH, mode, str(tmp_path)], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    saved, loaded = run("save"), run("load")
    assert saved == loaded
    from tests.core.toy_method import ToyScale  # the same numbers by hand, in this process

    model, tok = tiny_model("llama")
    by_hand = _logits(model, _ids(tok), ToyScale(0.5, [1]), ToyScale(1.5, [0]))
    torch.testing.assert_close(torch.tensor(loaded), by_hand[0, -1, :8], rtol=0, atol=1e-5)
    unregister_method("toy")  # imported above: registered in this process too
