"""``load_model``'s source table (``models.loading.SOURCES``): which row a name is, in the table's order."""

from __future__ import annotations

import importlib.util

import pytest

from geosteer.models import loading


@pytest.mark.parametrize(("name", "kind"), [("tiny-llama", "tiny"), ("tiny-nonsense", "tiny"),
                                            ("weights.gguf", "gguf"), ("org/model", "hub"), ("no-such-name", "hub")])
def test_each_kind_of_name_has_its_row(name, kind):
    assert loading.model_source(name).kind == kind


def test_a_folder_is_a_folder_and_a_bundled_alias_depends_on_what_is_installed(tmp_path, monkeypatch):
    assert loading.model_source(str(tmp_path)).kind == "folder"
    monkeypatch.setenv("GEOSTEER_CACHE", str(tmp_path / "cache"))
    installed = importlib.util.find_spec(loading.BUNDLED["gemma3-270m"].package) is not None
    assert loading.model_source("gemma3-270m").kind == ("bundled" if installed else "hub")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert loading.model_source("smollm2").kind == "hub"  # no package, no cache: its Hub id
    (tmp_path / "cache" / "smollm2").mkdir(parents=True)
    (tmp_path / "cache" / "smollm2" / loading._MARKER).write_text("{}")
    assert loading.model_source("smollm2").kind == "bundled"  # a complete cache is enough


def test_only_the_hub_row_checks_before_transformers_is_imported():
    rows = {s.kind: s for s in loading.SOURCES}
    assert [s.kind for s in loading.SOURCES][-1] == "hub" and rows["hub"].matches("anything")
    assert [k for k, s in rows.items() if s.check is not None] == ["hub"]


def test_a_tiny_model_loads_through_its_row():
    model, tok = loading.load_model("tiny-qwen3")
    assert model.config.model_type == "qwen3" and model.config._geosteer_name == "tiny-qwen3"
    assert not model.training and not any(p.requires_grad for p in model.parameters())
