"""Shipped artifacts by name (geosteer.shipped): found from any directory, a local folder of the same name first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geosteer import shipped
from geosteer.formats import CONFIG_NAME

ROOT = Path(__file__).resolve().parents[2]
QWEN = "qwen2.5-0.5b-surfaces-all"  # the scale ladder's 0.5B surfaces, shipped by the held-out rule


def test_the_shipped_surfaces_are_listed_and_found_by_name():
    assert "smollm2-surfaces-all" in shipped.names()
    p = shipped.shipped("smollm2-surfaces-all")
    assert p is not None and (p / CONFIG_NAME).is_file() and (p / "surfaces.safetensors").is_file()


@pytest.mark.parametrize("ref", ["", ".", "..", "nope", "surfaces/smollm2-surfaces-all", "../surfaces",
                                 "/smollm2-surfaces-all", ".hidden", "smollm2_tokenizer"])
def test_anything_else_is_not_a_shipped_name(ref):
    assert shipped.shipped(ref) is None
    assert shipped.expand(ref) == ref


def test_a_local_folder_of_the_same_name_comes_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shipped.expand("smollm2-surfaces-all") == shipped.shipped("smollm2-surfaces-all")
    (tmp_path / "smollm2-surfaces-all").mkdir()
    assert shipped.expand("smollm2-surfaces-all") == "smollm2-surfaces-all"


FORMS = [["--surfaces", "smollm2-surfaces-all"], ["--set", "surfaces=smollm2-surfaces-all"],
         ["--recipe", "smollm2-surfaces-all"]]


def test_every_way_of_naming_the_shipped_surfaces_steers_from_any_directory(monkeypatch, capsys, tmp_path, smollm2):
    """Outside the checkout (a fresh folder as the working directory), the shipped name in --surfaces, --set
    and --recipe steers alike, and geosteer.load finds the same folder."""
    import geosteer
    from tests.cli_helpers import run_cli

    monkeypatch.chdir(tmp_path)
    args = ["generate", "-m", "smollm2", "-p", "The theory of relativity states that", "--max-new-tokens", "8"]
    outs = []
    for extra in (*FORMS, []):
        code, out, err = run_cli(monkeypatch, capsys, *args, *extra)
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1] == outs[2] != outs[3]  # the same surfaces, which change the text
    model, _ = smollm2
    bank = geosteer.load("smollm2-surfaces-all", model=model)
    assert type(bank).__name__ == "SurfaceBank" and bank.coefficients.shape[0] == 30
    code, out, err = run_cli(monkeypatch, capsys, *args, "--surfaces", str(shipped.shipped("smollm2-surfaces-all")))
    assert code == 0 and out == outs[0], err


def test_the_qwen_surfaces_are_shipped_as_the_ladders_artifact():
    """The shipped 0.5B surfaces are the repository's ladder artifact, file for file, and load by name as a
    bank for every layer of the 0.5B."""
    import geosteer

    p = shipped.shipped(QWEN)
    assert QWEN in shipped.names() and p is not None
    src = ROOT / "artifacts" / "qwen2.5-0.5b-surfaces-65k"
    for name in (CONFIG_NAME, "surfaces.safetensors"):
        assert (p / name).read_bytes() == (src / name).read_bytes(), name
    assert json.loads((p / CONFIG_NAME).read_text())["base_model"] == "qwen2.5-0.5b"
    bank = geosteer.load(QWEN)
    assert type(bank).__name__ == "SurfaceBank" and tuple(bank.coefficients.shape) == (24, 14, 64, 11, 11)


def test_the_qwen_surfaces_met_the_shipping_rule():
    """The rule that admitted the SmolLM2 surfaces: held-out perplexity on the first 32,768 tokens, context 512,
    stride 256, the tokenizer's encoding, lower with the surfaces than without, measured on the shipped set."""
    doc = json.loads((ROOT / "docs/results/ladder/surfaces-heldout/qwen2.5-0.5b.json").read_text())
    meta, (row,) = doc["meta"], doc["rows"]
    assert meta["model"] == "qwen2.5-0.5b" and meta["surfaces"] == "artifacts/qwen2.5-0.5b-surfaces-65k"
    assert meta["max_tokens"] == 32768 and meta["encoding"] == "tokenizer"
    assert (row["context"], row["stride"]) == (512, 256) and row["tokens"] >= 32767
    assert row["surfaces_ppl"] < row["stock_ppl"]
