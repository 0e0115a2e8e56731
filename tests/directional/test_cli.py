"""``geosteer measure decompose`` and one-line errors of the ``geosteer directional`` verbs."""

import json

import pytest
from typer.testing import CliRunner


def test_decompose_cli_json_and_csv(tmp_path):
    from geosteer.cli import app

    csv = tmp_path / "d.csv"
    r = CliRunner().invoke(app, ["measure", "decompose", "-m", "tiny-llama", "--text-file", __file__, "--tokens", "24",
                                 "--layers", "0-1", "--json", "--csv", str(csv)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    sites = {(row["layer"], row["site"]) for row in data["rows"]}
    assert sites >= {(0, "attn"), (0, "mlp"), (0, "block"), (1, "value")}
    assert csv.read_text().splitlines()[0].startswith("layer,space,site")


@pytest.mark.parametrize("args,msg", [
    (["study", "directional", "sweep", "--sites", "resid_foo"], "unknown site 'resid_foo'; valid: attn_out"),
    (["ppl", "--corpus", "heldout", "--set", "scale_site=attn_out", "--set", "scale_par=nan"],
     "scale_par must be a finite number"),
    (["study", "directional", "pretrain", "--variants", "baseline,foo"],
     "unknown variant 'foo'; valid: baseline, attn_par"),
])
def test_cli_bad_input_one_line_error(args, msg, monkeypatch, capsys):
    from tests.cli_helpers import run_cli

    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and msg in err and "Traceback" not in err


@pytest.mark.parametrize("args,needle", [
    (["study", "directional", "pretrain", "--steps", "0"], "'--steps'"),
    (["study", "directional", "pretrain", "--context", "0"], "'--context'"),
    (["study", "directional", "pretrain", "--d-model", "3"],
     "--d-model 3 splits into 1 head(s) of odd or fractional size"),
    (["study", "directional", "pretrain", "--d-model", "100"], "--d-model 100 splits into 3 head(s)"),
    (["study", "directional", "pretrain", "--seed-list", ""], "bad --seed-list ''"),
    (["study", "directional", "pretrain", "--seed-list", "0,0"], "different seeds"),
    (["study", "directional", "strength", "-m", "tiny-llama", "--sites", ""], "--sites is empty"),
    (["study", "directional", "sweep", "-m", "tiny-llama", "--sites", " , "], "--sites is empty"),
    (["study", "directional", "diagonal", "-m", "tiny-llama", "--tokens", "0"], "'--tokens'"),
    (["study", "directional", "heads", "-m", "tiny-gpt2", "--text-len", "600"],
     "--text-len 600 is longer than the model's 512"),
    (["ppl", "-m", "tiny-llama", "--corpus", "heldout", "--set", "scale_site=attn_out", "--set", "scale_layers=7"],
     "layer 7 out of range"),
    (["measure", "decompose", "-m", "tiny-gpt2", "--tokens", "2000", "--chunk", "2000", "--no-value"],
     "--tokens/--chunk window 2000 is longer than the model's 512 positions"),
    (["measure", "decompose", "-m", "tiny-llama", "--chunk", "512", "--layers", "99"], "layer 99 out of range"),
    (["study", "directional", "diagonal", "-m", "tiny-llama", "--map-head", "99"], "--map-head: head 99 out of range"),
    (["study", "directional", "heads", "-m", "tiny-llama", "--heads", "99"], "--heads: head 99 out of range"),
])
def test_directional_verbs_refuse_before_any_weights_are_built(monkeypatch, capsys, tmp_path, args, needle):
    from tests.cli_helpers import refused_before_load

    monkeypatch.chdir(tmp_path)
    assert needle in refused_before_load(monkeypatch, capsys, *args)
    assert list(tmp_path.iterdir()) == []


def test_decompose_windows_past_the_positions_are_refused_by_the_library(tiny_model):
    from geosteer.directional.measure import measure_text
    from geosteer.errors import GeosteerError

    model, tok = tiny_model("gpt2")
    text = "word " * 2000
    with pytest.raises(GeosteerError, match="window .* 513 is longer than the model's 512 positions"):
        measure_text(model, tok, text, tokens=1000, chunk=513, value=False)
    rows, meta = measure_text(model, tok, text, tokens=600, chunk=512, layers=[0], value=False)  # two passes
    assert meta["tokens"] == 600 and rows
