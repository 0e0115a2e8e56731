"""A family of levers as one lever (``surfaces-best``): its choice is the one operating-point rule over the
union of its members' validation points, it reads no test number to choose, and its test numbers are those
of the point it chose (measured again when that point is not its member's own operating point)."""

from __future__ import annotations

import json

import pytest

from geosteer.bench.catalog import levers, parse_levers
from geosteer.bench.concepts import read_concepts
from geosteer.bench.family import SURFACE_FAMILY, family_record, register_family
from geosteer.bench.operating import choose_operating_point
from geosteer.errors import GeosteerError
from tests.bench.conftest import TINY


def _pt(score, kl, strength):
    return {"score": {"mean": score}, "control_kl": {"mean": kl}, "strength": strength}


def _row(lever, score, index, params=7, strength=1.0):
    d = {"mean": score, "lo": score, "hi": score}
    return {"concept": "c", "lever": lever, "strength": strength, "params": params, "seconds": 1.0,
            "cpu_seconds": 2.0, "operating_point": {"index": index, "label": f"{lever} s={strength:g}"},
            "score": d, "concept_score": d, "control_kl": d, "fluency": {"score": d}}


STOCK = _pt(0.5, 0.0, 0.0)
DOCS = {"a": {"curve": [STOCK, _pt(0.6, 0.1, 1.0), _pt(0.7, 0.9, 2.0)], "row": _row("a", 0.61, 1)},
        "b": {"curve": [STOCK, _pt(0.65, 0.2, 0.5)], "row": _row("b", 0.55, 1, params=3, strength=0.5)}}


def test_the_choice_is_the_rule_over_the_union_of_the_members_points():
    stock_row = _row("stock", 0.5, 0, params=0, strength=0.0)
    # budget 0.5: b's point (0.65) beats a's (0.6); a's 0.7 is over the budget
    rec = family_record("fam", ["a", "b"], DOCS, stock_row, 0.5)
    assert rec["row"]["operating_point"]["index"] == 3 and rec["row"]["operating_point"]["member"] == "b"
    assert rec["row"]["score"]["mean"] == 0.55 and rec["row"]["params"] == 3 and rec["row"]["strength"] == 0.5
    assert [c["member"] for c in rec["curve"]] == ["stock", "a", "a", "b"]
    assert rec["row"]["cpu_seconds"] == 4.0  # the family's cost: every member trained and validated
    # below every point's KL: the stock model
    rec = family_record("fam", ["a", "b"], DOCS, stock_row, 0.05)
    assert rec["row"]["operating_point"]["member"] == "stock" and rec["row"]["score"]["mean"] == 0.5
    assert rec["row"]["params"] == 0


def test_a_point_that_is_not_its_members_own_choice_is_measured_on_test():
    calls = []

    def measure(member, index):
        calls.append((member, index))
        return _row(member, 0.42, index, strength=2.0)

    stock_row = _row("stock", 0.5, 0, params=0, strength=0.0)
    assert family_record("fam", ["a", "b"], DOCS, stock_row, 1.0) is None  # nothing measured: no row
    rec = family_record("fam", ["a", "b"], DOCS, stock_row, 1.0, measure)
    assert calls == [("a", 2)]
    assert rec["row"]["score"]["mean"] == 0.42 and rec["row"]["operating_point"]["index"] == 2


def test_families_are_registered_over_levers_only():
    assert levers()["surfaces-best"].members == SURFACE_FAMILY
    assert all(m in levers() and not levers()[m].members for m in SURFACE_FAMILY)
    assert parse_levers("surfaces-best,lora") == ["surfaces-best", "lora"]
    with pytest.raises(GeosteerError, match="member"):
        register_family("bad-family", ["no-such-lever"], "x")
    with pytest.raises(GeosteerError, match="member"):
        register_family("bad-family", ["surfaces-best"], "x")


def _cached(out, lever):
    return json.loads((out / "cache" / "cats" / f"{lever}.json").read_text())


@pytest.fixture
def family(monkeypatch):
    import geosteer.bench.registry as registry
    from geosteer.bench.family import _not_built

    monkeypatch.setitem(registry._LEVERS, "fam", registry.Lever("fam", _not_built, "test family",
                                                                members=("caa", "vector")))
    return "fam"


def test_a_family_in_a_run_chooses_on_validation_only(tiny_model, concept_file, tmp_path, monkeypatch, family):
    import geosteer.bench.run as run

    measured = []
    real = run._measure

    def spy(model, tok, ctx, point, split, cfg):
        measured.append((point.lever, split))
        return real(model, tok, ctx, point, split, cfg)

    monkeypatch.setattr(run, "_measure", spy)
    model, tok = tiny_model("llama")
    out = tmp_path / "out"
    cfg = run.BenchConfig(model="tiny-llama", levers=[family], budget=TINY, kl_budget=10.0)
    doc = run.run_bench(model, tok, read_concepts(concept_file), cfg, out)
    assert [r["lever"] for r in doc["rows"]] == ["stock", family]  # the members run, as checkpoints only
    caa, vec = _cached(out, "caa"), _cached(out, "vector")
    union = [caa["curve"][0], *caa["curve"][1:], *vec["curve"][1:]]
    i = choose_operating_point(union, 10.0)
    row = doc["rows"][1]
    assert row["operating_point"]["index"] == i
    member = row["operating_point"]["member"]
    chosen = doc["rows"][0] if member == "stock" else _cached(out, member)["row"]
    assert json.dumps([row["score"], row["control_kl"]]) == json.dumps([chosen["score"], chosen["control_kl"]])
    # the family itself measured nothing: one test measurement per member at most, its own choice's
    assert not [m for m in measured if m[0] == family]
    assert sum(split == "test" for _, split in measured) <= 2
    # the members' test numbers do not enter the choice: changed, the family chooses the same point
    for lever in ("caa", "vector"):
        d = _cached(out, lever)
        d["row"]["score"] = {"mean": 0.99 if lever != member else chosen["score"]["mean"], "lo": 0, "hi": 1}
        (out / "cache" / "cats" / f"{lever}.json").write_text(json.dumps(d))
    (out / "cache" / "cats" / f"{family}.json").unlink()
    again = run.run_bench(model, tok, read_concepts(concept_file), cfg, out)
    assert again["rows"][1]["operating_point"]["index"] == i


def test_a_family_measures_a_chosen_point_its_member_did_not_choose(tiny_model, concept_file, tmp_path, family):
    import geosteer.bench.run as run

    model, tok = tiny_model("llama")
    out = tmp_path / "out"
    cfg = run.BenchConfig(model="tiny-llama", levers=["caa", "vector"], budget=TINY, kl_budget=10.0)
    run.run_bench(model, tok, read_concepts(concept_file), cfg, out)
    vec = _cached(out, "vector")
    j = 2 if vec["row"]["operating_point"]["index"] != 2 else 1  # a point the vector did not choose
    vec["curve"][j]["score"]["mean"] = 5.0  # best of the union on validation
    (out / "cache" / "cats" / "vector.json").write_text(json.dumps(vec))
    fam = run.BenchConfig(model="tiny-llama", levers=[family], budget=TINY, kl_budget=10.0)
    row = run.run_bench(model, tok, read_concepts(concept_file), fam, out)["rows"][1]
    assert row["operating_point"]["member"] == "vector" and row["strength"] == vec["curve"][j]["strength"]
    # the test measurement of that point, as the vector lever measures it when told the index
    ctx = run.prepare_concept(model, tok, read_concepts(concept_file)[0], cfg)
    direct = run.run_lever(model, tok, ctx, "vector", cfg, tmp_path / "w", index=j)["row"]
    assert json.dumps(row["score"]) == json.dumps(direct["score"])
    assert json.dumps(row["control_kl"]) == json.dumps(direct["control_kl"])


def test_paired_difference_against_hand_values():
    from geosteer.bench.results import paired_difference

    rows = [_row("x", 0.6, 1) | {"concept": "c1"}, _row("y", 0.5, 1) | {"concept": "c1"},
            _row("x", 0.4, 1) | {"concept": "c2"}, _row("y", 0.5, 1) | {"concept": "c2"},
            _row("x", 0.5, 1) | {"concept": "c3"}, _row("y", 0.5, 1) | {"concept": "c3"},
            _row("x", 0.9, 1) | {"concept": "c4"}]  # y did not measure c4: left out
    d = paired_difference(rows, "x", "y", n_boot=500)
    assert d["concepts"] == 3 and d["wins"] == ["c1"] and d["losses"] == ["c2"] and d["ties"] == ["c3"]
    assert d["difference"]["mean"] == pytest.approx(0.0, abs=1e-12)
    assert -0.1 <= d["difference"]["lo"] < 0 < d["difference"]["hi"] <= 0.1
