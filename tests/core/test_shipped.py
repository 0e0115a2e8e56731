"""Shipped artifacts by name (geosteer.shipped): found from any directory, a local folder of the same name first."""

from __future__ import annotations

import pytest

from geosteer import shipped
from geosteer.formats import CONFIG_NAME


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
