"""Every artifact a verb is given is checked against ``--model`` before the model loads: its format, its base
model (the recipe's too), its sizes, its tensors; a recipe whose folder key names the recipe itself is refused
by ``show`` and ``geosteer.load`` alike."""

from __future__ import annotations

import json
import os

import pytest
import torch

from tests.cli_helpers import one_line_exit_2, refused_before_load, run_cli


def _vectors(path, *, d: int = 64, base: str = "tiny-llama", empty: bool = False):
    from geosteer.vectors.apply import SteeringVectors

    vecs = {0: torch.zeros(0)} if empty else {0: torch.randn(d), 1: torch.randn(d)}
    return str(SteeringVectors(vecs, base_model=base, d_model=d, n_layers=3).save(path))


def _edit_config(folder, **fields):
    p = os.path.join(folder, "geosteer_config.json")
    doc = json.load(open(p))
    for k, v in fields.items():
        if v is KeyError:
            doc.pop(k)
        else:
            doc[k] = v
    with open(p, "w") as f:
        json.dump(doc, f)


@pytest.mark.parametrize("case,needle", [
    ("null", "base_model"), ("empty", "base_model"), ("missing", "base_model"),
    ("d32", "d_model 32; --model tiny-llama has 64"), ("other", "made for base model 'tiny-gpt2'"),
])
def test_a_vectors_artifact_that_does_not_fit_is_refused_before_load(monkeypatch, capsys, tmp_path, case, needle):
    if case == "d32":
        folder = _vectors(tmp_path / "v", d=32)
    else:
        folder = _vectors(tmp_path / "v", base="tiny-gpt2" if case == "other" else "tiny-llama")
        if case in ("null", "empty", "missing"):
            _edit_config(folder, base_model={"null": None, "empty": "", "missing": KeyError}[case])
    line = refused_before_load(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "hi",
                               "--set", f"vectors={folder}")
    assert needle in line


def test_an_empty_vectors_tensor_is_refused_before_load(monkeypatch, capsys, tmp_path):
    try:
        folder = _vectors(tmp_path / "v", empty=True)
    except Exception as e:  # noqa: BLE001 - refused when written: nothing to load
        assert "\n" not in str(e)
        return
    refused_before_load(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "hi", "--set",
                        f"vectors={folder}")


def test_force_and_base_model_let_another_models_artifact_through(tmp_path):
    from geosteer.cli.recipe import spec_from_options

    folder = _vectors(tmp_path / "v", base="tiny-gpt2")
    spec_from_options(None, [f"vectors={folder}"], model="tiny-llama", force=True)
    spec_from_options(None, [f"vectors={folder}"], model="tiny-llama", base_model="tiny-gpt2")


def test_a_recipe_for_another_base_model_is_refused_before_load(monkeypatch, capsys, tmp_path):
    from geosteer.recipe import InterventionSpec

    rec = InterventionSpec().with_values(scale_site="attn_out", scale_par=1.5).save(tmp_path / "r",
                                                                                   base_model="tiny-gpt2")
    line = refused_before_load(monkeypatch, capsys, "ppl", "-m", "tiny-llama", "--corpus", "heldout",
                               "--recipe", str(rec))
    assert "made for base model 'tiny-gpt2'" in line


def test_a_recipe_whose_folder_key_names_itself(monkeypatch, capsys, tmp_path):
    import geosteer
    from geosteer.errors import GeosteerError
    from geosteer.recipe import InterventionSpec

    rec = InterventionSpec().with_values(scale_site="attn_out", scale_par=1.5).save(tmp_path / "r",
                                                                                   base_model="tiny-llama")
    os.symlink(".", rec / "surfaces")
    _edit_config(rec, interventions={"surfaces": "surfaces"})
    with pytest.raises(GeosteerError, match="is the recipe folder itself"):
        geosteer.load(rec)
    code, _, err = run_cli(monkeypatch, capsys, "show", str(rec))
    one_line_exit_2(code, err)
    line = refused_before_load(monkeypatch, capsys, "ppl", "-m", "tiny-llama", "--corpus", "heldout",
                               "--recipe", str(rec))
    assert "recipe folder itself" in line
    (tmp_path / "r" / "surfaces").unlink()
    (tmp_path / "r" / "surfaces").mkdir()  # an empty folder is no surfaces artifact either
    with pytest.raises(GeosteerError, match="holds no geosteer artifact; surfaces takes a geosteer-surfaces"):
        geosteer.load(rec)


def test_an_artifact_of_another_format_under_a_key(monkeypatch, capsys, tmp_path):
    folder = _vectors(tmp_path / "v")
    line = refused_before_load(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "hi",
                               "--set", f"surfaces={folder}")
    assert "surfaces=" in line and "geosteer-vectors artifact; surfaces takes a geosteer-surfaces one" in line


@pytest.mark.parametrize("verb", [["measure", "explore", "--no-sensitivity", "--coverage-windows", "0",
                                   "--record-qk", "{tmp}/qk.json"], ["bench", "text"]])
def test_surfaces_of_another_base_model_before_load(monkeypatch, capsys, tmp_path, verb):
    import geosteer
    from geosteer.manifold import install, save

    m, _ = geosteer.load_model("tiny-gpt2")
    surf = save(install(m, grid_size=4), tmp_path / "s")
    args = [a.replace("{tmp}", str(tmp_path)) for a in verb]
    line = refused_before_load(monkeypatch, capsys, *args, "-m", "tiny-llama", "--surfaces", str(surf))
    assert "made for base model 'tiny-gpt2'" in line
