"""``geosteer learn vectors | show [--gguf]``: the artifact they write, and bad input as one line,
exit 2, checked before the model loads, nothing written."""

from __future__ import annotations

import json

import pytest
import torch

from tests.cli_helpers import one_line_exit_2, run_cli
from tests.vectors.test_peers import PAIRS


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(PAIRS))
    return path


def test_train_show_export(monkeypatch, capsys, tmp_path, pairs_file):
    import geosteer
    from geosteer.vectors import extract, import_gguf, load_vectors

    out = tmp_path / "happy"
    code, stdout, err = run_cli(monkeypatch, capsys, "learn", "vectors", "-m", "tiny-llama", "--pairs",
                                str(pairs_file), "--layers", "1-2", "--method", "pca", "--positions", "all",
                                "--out", str(out), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["layers"] == [1, 2] and doc["pairs"] == len(PAIRS) and abs(doc["norms"]["1"] - 1) < 1e-5
    model, tok = geosteer.load_model("tiny-llama")
    want = extract(model, tok, PAIRS, layers="1-2", method="pca", positions="all")
    got = load_vectors(out, model)
    for layer in (1, 2):
        torch.testing.assert_close(got.vectors[layer], want.vectors[layer], rtol=0, atol=1e-6)
    assert "geosteer learn vectors" in (out / "README.md").read_text()
    code, stdout, err = run_cli(monkeypatch, capsys, "show", str(out), "--json")
    assert code == 0, err
    shown = json.loads(stdout)
    assert shown["point"] == "resid_post" and [r["layer"] for r in shown["layers"]] == [1, 2]
    assert shown["extraction"]["method"] == "pca" and shown["extraction"]["positions"] == "all"
    code, stdout, err = run_cli(monkeypatch, capsys, "show", str(out), "--export", str(tmp_path / "h.gguf"),
                                "--json")
    assert code == 0, err
    assert json.loads(stdout)["export"] == str(tmp_path / "h.gguf")
    assert torch.equal(import_gguf(tmp_path / "h.gguf").vectors[2], got.vectors[2])
    # an existing artifact is replaced only with --overwrite
    args = ["learn", "vectors", "-m", "tiny-llama", "--pairs", str(pairs_file), "--layers", "0", "--out", str(out)]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    one_line_exit_2(code, err)
    assert "--overwrite" in err and load_vectors(out).extraction["method"] == "pca"
    code, _, err = run_cli(monkeypatch, capsys, *args, "--overwrite")
    assert code == 0, err
    assert list(load_vectors(out).vectors) == [0]


def test_train_from_two_prompt_sets(monkeypatch, capsys, tmp_path):
    import geosteer
    from geosteer.vectors import extract, load_vectors

    pos, neg = [p for p, _ in PAIRS], [n for _, n in PAIRS][:4]
    (tmp_path / "pos.json").write_text(json.dumps(pos))
    (tmp_path / "neg.json").write_text(json.dumps(neg))
    code, stdout, err = run_cli(monkeypatch, capsys, "learn", "vectors", "-m", "tiny-llama", "--positive",
                                str(tmp_path / "pos.json"), "--negative", str(tmp_path / "neg.json"),
                                "--layers", "1", "--method", "probe", "--out", str(tmp_path / "o"), "--json")
    assert code == 0, err
    assert json.loads(stdout)["positive"] == 6 and json.loads(stdout)["negative"] == 4
    model, tok = geosteer.load_model("tiny-llama")
    want = extract(model, tok, positive=pos, negative=neg, layers=[1], method="probe")
    torch.testing.assert_close(load_vectors(tmp_path / "o").vectors[1], want.vectors[1], rtol=0, atol=1e-6)


def test_bad_input_is_one_line_before_the_model_loads(monkeypatch, capsys, tmp_path, pairs_file):
    import geosteer.vectors.cli as vcli

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(vcli, "load", no_load)
    (tmp_path / "bad.json").write_text("[1, 2")
    (tmp_path / "shape.json").write_text(json.dumps([["only one"]]))
    (tmp_path / "empty.json").write_text("[]")
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    base = ["learn", "vectors", "-m", "tiny-llama", "--out", str(tmp_path / "o")]
    cases = [
        (["--pairs", str(tmp_path / "nope.json")], "pairs file not found"),
        ([], "give --pairs FILE"),
        (["--positive", str(pairs_file)], "give --pairs FILE"),
        (["--pairs", str(pairs_file), "--positive", str(pairs_file)], "not both"),
        (["--positive", str(tmp_path / "shape.json"), "--negative", str(tmp_path / "shape.json")],
         "positive file"),
        (["--positive", str(pairs_file), "--negative", str(pairs_file), "--method", "pca"], "needs --pairs"),
        (["--pairs", str(tmp_path / "bad.json")], "is not valid JSON"),
        (["--pairs", str(tmp_path / "shape.json")], "pair 0 must be [positive, negative]"),
        (["--pairs", str(tmp_path / "empty.json")], "non-empty list"),
        (["--pairs", str(pairs_file), "--method", "cca"], "unknown method 'cca'; valid: mean_diff, pca"),
        (["--pairs", str(pairs_file), "--point", "mlp_in"], "unknown hook point 'mlp_in'"),
        (["--pairs", str(pairs_file), "--positions", "first"], "bad positions 'first'"),
        (["--pairs", str(pairs_file), "--layers", "3-1"], "reversed layer range"),
        (["--pairs", str(pairs_file), "--batch-size", "0"], "batch size must be >= 1"),
    ]
    for extra, msg in cases:
        code, _, err = run_cli(monkeypatch, capsys, *base, *extra)
        one_line_exit_2(code, err)
        assert msg in err, (extra, err)
    code, _, err = run_cli(monkeypatch, capsys, "learn", "vectors", "--pairs", str(pairs_file), "--out", str(user))
    one_line_exit_2(code, err)
    assert "not a geosteer output folder" in err and (user / "notes.txt").read_text() == "keep me"
    assert not (tmp_path / "o").exists()
    code, _, err = run_cli(monkeypatch, capsys, "show", str(user), "--export", str(tmp_path / "x.gguf"))
    one_line_exit_2(code, err)
    assert "is not a geosteer artifact" in err and not (tmp_path / "x.gguf").exists()


def test_layer_out_of_range_before_the_model_loads(monkeypatch, capsys, tmp_path, pairs_file):
    import geosteer.vectors.cli as vcli

    monkeypatch.setattr(vcli, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    code, _, err = run_cli(monkeypatch, capsys, "learn", "vectors", "-m", "tiny-llama", "--pairs", str(pairs_file),
                           "--layers", "7", "--out", str(tmp_path / "o"))
    one_line_exit_2(code, err)
    assert "0..2" in err and not (tmp_path / "o").exists()
