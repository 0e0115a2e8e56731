"""Shared artifact conventions: version gate, forward-compatible keys, model cards, atomic folders,
recipes."""

import json
import warnings

import pytest
import torch

from geosteer import artifacts as A
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.interventions import steer
from geosteer.methods import unregister_method
from geosteer.recipe import InterventionSpec, load_recipe, register_builder, save_recipe
from tests.conftest import sample_ids

KNOWN = ("base_model", "layers")


def test_check_config_version_gate_and_unknown_keys():
    ok = {"format": "geosteer-x", "version": 2, "base_model": "m", "layers": [1]}
    with warnings.catch_warnings():
        warnings.simplefilter("error", A.ArtifactWarning)
        assert A.check_config(ok, fmt="geosteer-x", reader_version=2, known_keys=KNOWN) == []
    with pytest.warns(A.ArtifactWarning, match="added_later, shiny"):
        unknown = A.check_config({**ok, "shiny": 1, "added_later": {}}, fmt="geosteer-x", reader_version=2,
                                 known_keys=KNOWN)
    assert unknown == ["added_later", "shiny"]
    with pytest.raises(ArtifactError, match="newer geosteer .*version 3.*up to 2"):
        A.check_config({**ok, "version": 3}, fmt="geosteer-x", reader_version=2, known_keys=KNOWN)
    with pytest.raises(ArtifactError, match="expected 'geosteer-x'"):
        A.check_config({**ok, "format": "other"}, fmt="geosteer-x", reader_version=2, known_keys=KNOWN)
    with pytest.raises(ArtifactError, match="version must be an integer"):
        A.check_config({**ok, "version": "two"}, fmt="geosteer-x", reader_version=2, known_keys=KNOWN)


def test_read_config_errors(tmp_path):
    with pytest.raises(ArtifactError, match="missing geosteer_config.json"):
        A.read_config(tmp_path)
    (tmp_path / A.CONFIG_NAME).write_text("{not json")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        A.read_config(tmp_path)


def test_model_card_has_hub_metadata_and_the_facts():
    text = A.render_model_card(method="manifold.surfaces", base_model="smollm2", n_parameters=123456,
                               training={"data": "bundled corpus, train split", "tokens": 300000, "seed": 0},
                               ppl_before=21.5, ppl_after=20.25, command="geosteer learn surfaces --seed 0",
                               files=["geosteer_config.json", "surfaces.safetensors"])
    head, body = text.split("---\n", 2)[1:]
    assert "library_name: geosteer" in head and "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in head
    assert "- manifold" in head
    for needle in ("| training data | bundled corpus, train split |", "| training tokens | 300,000 |",
                   "| held-out perplexity before | 21.5000 |", "| held-out perplexity after | 20.2500 |",
                   "| trainable parameters | 123,456 |", "geosteer learn surfaces --seed 0",
                   "- `surfaces.safetensors`"):
        assert needle in body, needle
    assert "| held-out perplexity after | n/a |" in A.render_model_card(method="m", base_model="b")


def test_write_folder_atomic_keeps_old_folder_on_crash(tmp_path):
    target = tmp_path / "art"
    A.write_folder_atomic(target, lambda d: (d / "a.txt").write_text("old"))

    def crash(d):
        (d / "a.txt").write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        A.write_folder_atomic(target, crash)
    assert (target / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["art"]  # no temporary leftovers
    with pytest.raises(ArtifactError, match="exists"):
        A.write_folder_atomic(target, lambda d: None, overwrite=False)


def test_resolve_and_hub_errors(tmp_path, monkeypatch):
    with pytest.raises(ArtifactError, match="exactly one"):
        A.resolve(tmp_path, repo_id="org/x")
    with pytest.raises(ArtifactError, match="no artifact folder"):
        A.resolve(tmp_path / "missing")
    assert A.resolve(tmp_path) == tmp_path
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never touches the network
    with pytest.raises(ArtifactError, match="Hub repo org/never-made is not in the local Hub cache"):
        A.resolve(repo_id="org/never-made")
    with pytest.raises(ArtifactError, match="missing geosteer_config.json"):
        A.push(tmp_path, "org/x")


@pytest.fixture()
def tiny_with_artifacts(tiny_model, tmp_path):
    import geosteer.manifold as M
    from geosteer.dynamics.gates import FFNGates

    model, tok = tiny_model("llama")
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))
    M.uninstall(model)
    M.save(bank, tmp_path / "surfaces")
    gates = FFNGates.for_model(model)
    with torch.no_grad():
        gates.alpha.copy_(torch.tensor([0.5, 1.5, 0.0]))
    gates.save(tmp_path / "gates")
    return model, tok, tmp_path


def test_recipe_round_trip_reproduces_the_interventions(tiny_with_artifacts):
    import geosteer.manifold as M
    from geosteer.directional.sites import ComponentScale
    from geosteer.dynamics.gates import load_gates
    from geosteer.manifold.edit import apply_edits

    model, tok, d = tiny_with_artifacts
    edits = ["set=0.3 layer=1 head=2",
             {"op": "scale", "value": -2.0, "layers": [1], "heads": [2], "dims": [3]}]
    spec = InterventionSpec(surfaces=str(d / "surfaces"), edits=edits, scale_site="attn_out",
                            scale_par=0.5, scale_layers="0;2", gates=str(d / "gates"))
    folder = save_recipe(d / "recipe", spec, base_model="tiny-llama", command="pytest", ppl_before=1.0)
    assert {p.name for p in folder.iterdir()} == {"geosteer_config.json", "README.md", "surfaces", "gates"}
    assert "| held-out perplexity before | 1.0000 |" in (folder / "README.md").read_text()
    loaded, doc = load_recipe(folder)
    assert doc["format"] == "geosteer-recipe" and doc["version"] == 1
    ids = sample_ids(tok)
    with torch.no_grad(), steer(model, *loaded.build(model)):
        ours = model(ids).logits
    # the same edits made by hand from the original artifacts
    bank = M.load(d / "surfaces", model=model)
    apply_edits(bank, ["set=0.3 layer=1 head=2", "scale=-2 layer=1 head=2 dim=3"])
    by_hand = [bank, ComponentScale("attn_out", 0.5, 1.0, [0, 2]), load_gates(d / "gates", model)]
    with torch.no_grad(), steer(model, *by_hand):
        ref = model(ids).logits
    with torch.no_grad():
        stock_check = model(ids).logits
    torch.testing.assert_close(ours, ref)
    assert (ours - stock_check).abs().max() > 1e-3


def test_recipe_forward_compatible_and_versioned(tiny_with_artifacts):
    _, _, d = tiny_with_artifacts
    spec = InterventionSpec(mlp_variant="radial", mlp_layers=1)
    folder = save_recipe(d / "r", spec, base_model="tiny-llama")
    doc = json.loads((folder / A.CONFIG_NAME).read_text())
    doc["future_field"] = 1
    doc["interventions"]["future_knob"] = 3
    (folder / A.CONFIG_NAME).write_text(json.dumps(doc))
    with pytest.warns(A.ArtifactWarning) as rec:
        spec, _ = load_recipe(folder)
    said = " ".join(str(r.message) for r in rec)
    assert "future_field" in said and "future_knob" in said
    assert spec.mlp_variant == "radial"
    doc["version"] = 99
    (folder / A.CONFIG_NAME).write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="newer geosteer"):
        load_recipe(folder)


def test_spec_errors_and_extension_point(tiny_model):
    from geosteer.interventions import ScaleHook

    model, tok = tiny_model("llama")
    with pytest.raises(GeosteerError, match="unknown recipe keys: bogus"):
        InterventionSpec.from_dict({"bogus": 1})
    with pytest.raises(GeosteerError, match="scale_par must be a number"):
        InterventionSpec.from_dict({"scale_site": "attn_out", "scale_par": "half"})
    register_builder("test-resid-scale", ["test_resid_scale"],
                     lambda m, v: [ScaleHook("resid_post", float(v["test_resid_scale"]), layers=[0])])
    spec = InterventionSpec.from_dict({"test_resid_scale": 0.5})
    ivs = spec.build(model)
    assert len(ivs) == 1 and ivs[0].point == "resid_post"
    with pytest.raises(ValueError, match="already taken: surfaces"):
        register_builder("other", ["surfaces"], lambda m, v: [])
    unregister_method("test-resid-scale")


def test_bad_surface_edit_is_one_line_error(tiny_with_artifacts):
    model, _, d = tiny_with_artifacts
    for edits, msg in (("explode layer=1", "unknown edit 'explode'"), ("zero layer=7", "layer")):
        with pytest.raises(GeosteerError, match=f"bad surface edit.*{msg}"):
            InterventionSpec(surfaces=str(d / "surfaces"), edits=edits).build(model)


@pytest.mark.parametrize("kind", ["surfaces", "gates"])
def test_method_artifacts_share_the_version_gate_and_card(tiny_with_artifacts, kind):
    """Surfaces and gates go through check_config: unknown keys warned (and loaded), newer versions refused."""
    import geosteer.manifold as M
    from geosteer.dynamics.gates import load_gates

    model, _, d = tiny_with_artifacts
    folder = d / kind
    doc = json.loads((folder / A.CONFIG_NAME).read_text())
    assert doc["format"] == f"geosteer-{kind}" and doc["version"] == 1 and "geosteer_version" in doc
    card = (folder / A.CARD_NAME).read_text()
    assert card.startswith("---\nlibrary_name: geosteer\n") and "tiny-llama" in card
    load = (lambda f: M.load(f, model=model)) if kind == "surfaces" else \
        (lambda f: load_gates(f, model))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(folder)
    doc["from_the_future"] = {"x": 1}
    (folder / A.CONFIG_NAME).write_text(json.dumps(doc))
    with pytest.warns(A.ArtifactWarning, match="from_the_future"):
        loaded = load(folder)
    assert loaded is not None
    doc["version"] = 99  # newer than any reader (surfaces read version 2: exact walls)
    (folder / A.CONFIG_NAME).write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="newer geosteer"):
        load(folder)


