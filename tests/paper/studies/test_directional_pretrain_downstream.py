"""paper/studies/directional/pretrain_downstream.py: same loop as pretrain.train_one, gated variant, the runner."""

import json

import pytest
import torch

from geosteer_paper.directional.gated import GatedParallelScale
from geosteer_paper.directional.pretrain import sample_batch, train_one
from studies.directional.pretrain_downstream import main, train_variant

KW = {"d_model": 32, "layers": 2, "heads": 2, "ffn": 64}


def _data():
    g = torch.Generator().manual_seed(0)
    train = torch.randint(0, 256, (5000,), generator=g)
    vals = [sample_batch(train, torch.Generator().manual_seed(9), 2, 16)]
    return train, vals


@pytest.mark.parametrize("variant", ["baseline", "value_par", "attn_par"])
def test_loop_equals_pretrain_train_one(variant):
    train, vals = _data()
    kw = dict(steps=5, batch=2, ctx=16, lr=3e-3, eval_every=2, model_kw=KW, log=lambda *_: None)
    ref = train_one(variant, 0, train, vals, **kw)
    got = train_variant(variant, 0, train, vals, **kw)
    assert [r["val_loss"] for r in got["curve"]] == [r["val_loss"] for r in ref["curve"]]
    assert got["params"] == ref["params"] and got["gate_params"] == 0


def test_gated_variant_learns_its_gate_and_scores_after():
    train, vals = _data()
    seen = {}

    def after(model, ivs):
        (gate,) = ivs
        assert isinstance(gate, GatedParallelScale)
        seen["w"] = gate.weight.detach().clone()
        return "scored"

    res = train_variant("value_gated", 0, train, vals, steps=4, batch=2, ctx=16, lr=3e-3, eval_every=2,
                        model_kw=KW, after=after, log=lambda *_: None)
    assert res["after"] == "scored" and res["gate_params"] == 2 * 32  # one w per layer
    assert seen["w"].abs().max() > 0  # moved from its zero start
    assert all(0 < r["mean_gate"] < 1 for r in res["curve"])


def test_runner_writes_resumes_and_refuses(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["--variants", "baseline,value_gated", "--seeds", "0", "--steps", "3", "--batch", "2", "--ctx", "16",
            "--d-model", "32", "--layers", "1", "--eval-every", "3", "--val-batches", "1", "--proxy-n", "3",
            "--out", str(out)]
    main(args)
    doc = json.loads(out.read_text())
    assert [(r["variant"], r["seed"]) for r in doc["runs"]] == [("baseline", 0), ("value_gated", 0)]
    assert {p["task"] for p in doc["runs"][0]["proxy"]} == {"proxy_cloze", "proxy_nextsent", "proxy_fact"}
    assert all(p["n"] == 3 and 0 <= p["acc"] <= 1 for p in doc["runs"][0]["proxy"])
    before = out.read_text()
    main(args)  # resume: nothing new trained, file untouched
    doc2 = json.loads(out.read_text())
    assert out.read_text() == before and len(doc2["runs"]) == 2
    with pytest.raises(SystemExit) as e:
        main(args[:-2] + ["--lr", "1e-3", "--out", str(out)])  # other settings into the same file
    assert e.value.code == 2 and "other settings" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--variants", "nope", "--out", str(tmp_path / "x.json")])
    assert e.value.code == 2


def _comparable(doc: dict) -> dict:
    """A results file less what a rerun may change: the recorded commands and each run's wall time."""
    meta = {k: v for k, v in doc["meta"].items() if k != "commands"}
    runs = [{k: v for k, v in r.items() if k != "train_seconds"} for r in doc["runs"]]
    return {"meta": meta, "runs": runs, "curves": doc["curves"]}


def test_an_interrupted_run_resumed_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    from studies.directional import pretrain_downstream as study

    args = ["--variants", "baseline,attn_par", "--seeds", "0,1", "--steps", "4", "--batch", "2", "--ctx", "16",
            "--d-model", "16", "--layers", "1", "--eval-every", "2", "--val-batches", "1", "--proxy-n", "2"]
    whole = tmp_path / "whole.json"
    main(args + ["--out", str(whole)])

    cut = tmp_path / "cut.json"
    real, calls = study.train_variant, []

    def stopped_at_the_third(*a, **kw):  # the third (variant, seed) run is killed mid-way
        calls.append(a[:2])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(study, "train_variant", stopped_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        main(args + ["--out", str(cut)])
    partial = json.loads(cut.read_text())
    assert [(r["variant"], r["seed"]) for r in partial["runs"]] == [("baseline", 0), ("attn_par", 0)]
    trained = []
    monkeypatch.setattr(study, "train_variant", lambda *a, **kw: trained.append(a[:2]) or real(*a, **kw))
    main(args + ["--out", str(cut)])
    resumed = json.loads(cut.read_text())
    assert trained == [("baseline", 1), ("attn_par", 1)]  # only the runs not on record
    assert _comparable(resumed) == _comparable(json.loads(whole.read_text()))
    assert len(resumed["meta"]["commands"]) == 2  # the stopped command and its resumption
