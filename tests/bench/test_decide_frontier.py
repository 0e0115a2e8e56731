"""The frontier (concept gain over stock at every control-KL level, per lever), its figure, the training
summary and the per-step log, the strength flag, and the --kl-levels option."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from geosteer.bench.design import DECISION_LEVELS, KL_LEVELS, Design, parse_levels
from geosteer.errors import GeosteerError
from tests.bench.test_decide import _items

LEVELS = ("0.02", "0.05", "0.1", "0.2", "0.5")


def _run_folder(root, gains: dict[str, float]) -> None:
    rng = np.random.default_rng(3)
    for concept, gain in gains.items():
        unit = root / "units" / concept / "s0"
        unit.mkdir(parents=True)
        ctx = {"concept": concept, "kind": "topic-promote", "direction": "promote", "seed": 0,
               "prompts": [f"prompt {i}" for i in range(4)], "cpu_seconds": 1.0, "stock": _items(rng, 0.0),
               "admission": {"auc": 0.9, "admitted": True},
               "keyword_probe": {"words": ["x"], "score": 0.01, "stock_score": 0.4, "below_stock": True}}
        (unit / "context.json").write_text(json.dumps(ctx))
        log = [{"step": i, "loss": 1.0 / i, "grad_norm": 0.5, "margin": 0.1 * i, **({"kl_s1": 0.03 * i} if i % 2 == 0
                else {})} for i in range(1, 5)]
        train = {"steps": 4, "reached": True, "capped": False, "final_kl": 0.12, "kl_target": 0.1, "final_loss": 0.25,
                 "final_margin": 0.4, "pool": [32, 32], "log": log}
        levels = {lv: {"kl": float(lv), "strength": float(lv) / 0.1, "reached": True,
                       "strength_in_range": 0.5 <= float(lv) / 0.1 <= 2, "items": _items(rng, gain * float(lv))}
                  for lv in LEVELS}
        doc = {"lever": "vector", "lr": 0.01, "params": 8, "cpu_seconds": 2.0, "train_cpu_seconds": 1.0,
               "levels": levels, "info": {"train": train, "lr": 0.01}}
        (unit / "vector.json").write_text(json.dumps(doc))
    (root / "learning_rates.json").write_text(json.dumps({
        "search": {"vector": {"grid": [0.001, 0.01, 0.1], "chosen": 0.01, "interior": True}},
        "step_cap": {"cap": 5}}))


def test_the_report_gives_the_frontier_the_figure_and_the_training(tmp_path):
    from geosteer.bench.decide_report import write_report
    from geosteer.bench.tdist import concept_t

    _run_folder(tmp_path, {"a": 1.0, "b": 2.0, "c": 1.5})
    doc = write_report(tmp_path, Design())
    assert doc["kl_levels"] == list(LEVELS) and doc["decision_levels"] == ["0.05", "0.2"]
    rows = {r["kl_level"]: r for r in doc["frontier"] if r["lever"] == "vector"}
    assert list(rows) == list(LEVELS)
    recs = [r for r in _csv(tmp_path / "records.csv")]
    for lv, r in rows.items():  # by hand: per-concept mean of vector - stock concept scores, then t over concepts
        def scores(c, lever, lv=lv):
            return np.asarray([float(x["concept_score"]) for x in recs
                               if (x["concept"], x["kl_level"], x["lever"]) == (c, lv, lever)])
        means = {c: scores(c, "vector") - scores(c, "stock") for c in ("a", "b", "c")}
        want = concept_t(means, 0.05)
        assert math.isclose(r["mean"], want["mean"]) and math.isclose(r["lo"], want["lo"]) and r["n_concepts"] == 3
        assert r["strength_outside"] == (0 if lv in ("0.05", "0.1", "0.2") else 3) and math.isclose(r["kl"], float(lv))
    assert rows["0.5"]["mean"] > rows["0.02"]["mean"]
    assert {x["kl_level"] for x in doc["strength_outside"]} == {"0.02", "0.5"}
    assert [r["a"] for r in doc["endpoints"]] and {r["kl_level"] for r in doc["endpoints"]} == {"0.05", "0.2"}
    train = doc["training"][0]
    assert (train["lever"], train["lr"], train["interior"], train["step_cap"], train["steps_max"],
            train["reached"], train["pool_min"]) == ("vector", 0.01, True, 5, 4, 3, 32)
    steps = _csv(tmp_path / "training.csv")
    assert len(steps) == 12 and {"loss", "margin", "kl_s1", "lever", "concept"} <= set(steps[0])
    text = (tmp_path / "verdict.txt").read_text()
    assert "Concept gain over stock against control KL" in text and "How the learned levers were trained" in text
    view = json.loads((tmp_path / "results.json").read_text())["axbench_view"]  # AxBench's protocol, its CSV
    assert [r["lever"] for r in view["levers"]] == ["vector"] and view["levers"][0]["n_concepts"] == 3
    chosen = _csv(tmp_path / "axbench_view.csv")
    assert len(chosen) == 3 and {r["kl_level"] for r in chosen} <= set(LEVELS) and "AxBench's protocol" in text
    html = (tmp_path / "frontier.html").read_text()
    assert "vector" in html and "concept gain over stock" in html


def _csv(path):
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_figure_draws_one_line_per_lever_with_interval_bars():
    from geosteer.bench.decide_frontier import figure

    rows = [{"lever": lever, "kl_level": lv, "kl": float(lv), "mean": 0.1 * i, "lo": 0.1 * i - 0.05,
             "hi": 0.1 * i + 0.02, "n_concepts": 4} for lever in ("caa", "lora") for i, lv in enumerate(LEVELS)]
    fig = figure({"model": "tiny", "frontier": rows})
    assert [t.name for t in fig.data] == ["caa", "lora"]
    assert list(fig.data[0].error_y.array) == pytest.approx([0.02] * 5)
    assert list(fig.data[0].error_y.arrayminus) == pytest.approx([0.05] * 5)
    assert fig.layout.title.text.startswith("tiny")


def test_kl_levels_are_bounded():
    assert parse_levels("0.02,0.05,0.1,0.2,0.5") == KL_LEVELS and len(KL_LEVELS) >= 5
    assert set(DECISION_LEVELS) <= set(KL_LEVELS)
    for text, needle in (("0.05,x", "expected comma-separated numbers"), ("0,0.05,0.2", "out of range"),
                         ("0.05,0.2,6", "out of range"), ("0.05,0.2,nan", "out of range"),
                         ("0.2,0.05", "sorted, each once"), ("0.05,0.05,0.2", "sorted, each once"),
                         (",".join(f"{x / 100:g}" for x in range(1, 12)) + ",0.2", "at most 10"),
                         ("0.02,0.05,0.1", "must hold the decision rule's levels")):
        with pytest.raises(GeosteerError, match=needle):
            parse_levels(text)


@pytest.mark.parametrize("levels,needle", [
    ("0.05,0.2,9", "--kl-levels: level 9 is out of range"),
    ("0.2,0.05", "give the levels sorted, each once"),
    ("0.05,0.2,a", "expected comma-separated numbers"),
])
def test_bad_kl_levels_are_one_line_before_any_model_loads(monkeypatch, capsys, tmp_path, levels, needle):
    from tests.bench.test_decide_inputs import _decide

    err = _decide(monkeypatch, capsys, tmp_path, "--kl-levels", levels, "--out", "run")
    assert needle in err and not (tmp_path / "run").exists()


def test_a_folder_of_other_levels_is_refused(monkeypatch, capsys, tmp_path):
    from geosteer.bench import cli_decide
    from tests.bench.test_decide_inputs import _decide, _seal_state

    monkeypatch.setattr(cli_decide, "_check_models", lambda model, reader, installed=True: "gemma3-270m")  # installed
    _seal_state(tmp_path / "run")  # the default levels
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", "--kl-levels", "0.05,0.2")
    assert "holds a run of another design: design" in err and "kl_levels=[0.02, 0.05, 0.1, 0.2, 0.5]" in err


def test_the_dry_run_estimates_cpu_hours_from_the_committed_costs(tmp_path):
    from geosteer.bench.cli_decide import dry_run
    from geosteer.bench.decide_cost import COMMITTED, COMMITTED_CONTEXT
    from geosteer.bench.design import EARLIER

    root = __import__("pathlib").Path(__file__).resolve().parents[2] / "docs/results/decide/results.json"
    doc = json.loads(root.read_text(encoding="utf-8"))
    for c in doc["costs"]:
        assert (c["cpu_seconds"], c["train_cpu_seconds"]) == pytest.approx(COMMITTED[c["lever"]]), c["lever"]
    assert float(np.median([c["context_cpu_seconds"] for c in doc["concepts"]])) == COMMITTED_CONTEXT
    five, two = dry_run(Design(), 22, 8), dry_run(Design(kl_levels=(0.05, 0.2)), 22, 8)
    assert five["cost"]["test_cpu_hours"] > two["cost"]["test_cpu_hours"] > 0
    assert 0 < five["minimum_detectable_effect"] < 1
    # the committed design gives the committed per-lever costs, the learned levers' training + its KL checks
    earlier = dry_run(EARLIER, 16, 7)["cost"]["per_lever_cpu_seconds"]
    assert earlier["caa"] == pytest.approx(COMMITTED["caa"][0], abs=0.1)
    assert earlier["lora"] == pytest.approx(COMMITTED["lora"][1] * 1.15 + COMMITTED["lora"][0] - COMMITTED["lora"][1],
                                            abs=0.1)


class _Encoder:
    """A deterministic stand-in for the sentence encoder: hashed bag-of-words unit rows."""

    name_or_path = "hashed-words"

    def encode(self, texts):
        import hashlib

        out = np.zeros((len(texts), 384), np.float32)
        for i, t in enumerate(texts):
            for w in (t or "").lower().split():
                out[i, int(hashlib.sha256(w.encode()).hexdigest(), 16) % 384] += 1.0
            out[i] /= max(1e-6, float(np.linalg.norm(out[i])))
        return out


def test_one_unit_on_a_tiny_model_is_trained_by_the_rule_and_read_at_every_level(tiny_model, tmp_path):
    """run_unit end to end: the learned lever's record holds its per-step log, every level is read, each
    matched strength is flagged in or out of [0.5, 2], and the step cap is in the unit's fingerprint."""
    from geosteer.bench.concepts import concept_from_dict
    from geosteer.bench.decide_concepts import DecideConcept
    from geosteer.bench.decide_run import run_unit
    from geosteer.bench.decide_score import Readers
    from tests.bench.conftest import CATS

    model, tok = tiny_model("llama")
    c = concept_from_dict({**CATS, "prompts": CATS["prompts"][:2]})
    pos = [f"{t} ({i})" for i in range(34) for t in CATS["positive"]][:200]  # the judge's minimum a side
    neg = [f"{t} ({i})" for i in range(34) for t in CATS["negative"]][:200]
    dc = DecideConcept(c, "file-promote", pos, neg,
                       {"kind": "texts", "positive": CATS["positive"][:3], "negative": CATS["negative"][:3]})
    design = Design(test_prompts=2, new_tokens=3, control_prompts=2, train_controls=2, train_texts=4, train_words=6,
                    steps=6, batch_texts=2, kl_levels=(0.02, 0.05, 0.2), train_kl=0.05, kl_every=1)
    r = Readers(model, tok, model, tok, _Encoder(), chat=False)
    docs = run_unit(r, dc, 0, tmp_path, design, {"vector": 0.05}, log=lambda _: None, names=["vector", "caa"],
                    steps=4)
    vec = docs["vector"]
    assert set(vec["levels"]) == {"0.02", "0.05", "0.2"} and vec["fingerprint"]["steps"] == 4
    train = vec["info"]["train"]
    assert 1 <= train["steps"] <= 4 and len(train["log"]) == train["steps"] and train["pool"] == [4, 4]
    assert train["reached"] or train["capped"]
    for v in (*vec["levels"].values(), *docs["caa"]["levels"].values()):
        assert v["strength_in_range"] == (0.5 <= v["strength"] <= 2)
    again = run_unit(r, dc, 0, tmp_path, design, {"vector": 0.05}, log=lambda _: None, names=["vector"], steps=4)
    assert again["vector"] == json.loads(json.dumps(vec))  # read back, not trained again
