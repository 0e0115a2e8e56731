"""The scale ladder's rules: the gap to the paper's band, the verdict on whether it closes with size, the
shipped criteria (every item of the report it names exists, every rung has a command), and the report's
section read from per-rung results files."""

from __future__ import annotations

import json

import pytest

from geosteer_paper.reproduction import load_items
from geosteer_paper.reproduction.ladder import (
    FAMILY_STEP,
    RUNGS,
    Band,
    LadderItem,
    evaluate_ladder,
    family_step,
    gap,
    ladder_markdown,
    load_ladder,
    verdict,
)


def _item(**over) -> LadderItem:
    base = {"id": "3.10", "slug": "s", "kind": "inference", "what": "w", "paper": "p",
            "band": {"kind": "below", "threshold": 1.0}, "quantity": {"path": "x"}, "models": list(RUNGS),
            "budget": "b", "command": "c"}
    return LadderItem.model_validate({**base, **over})


def test_gap_is_the_distance_outside_the_papers_band():
    assert gap(Band(kind="below", threshold=1.0), 3.5) == 2.5
    assert gap(Band(kind="below", threshold=1.0), 0.2) == 0.0
    assert gap(Band(kind="above", threshold=0.97), 0.89) == pytest.approx(0.08)
    between = Band(kind="between", lo=0.69, hi=0.83)
    assert gap(between, 0.99) == pytest.approx(0.16) and gap(between, 0.5) == pytest.approx(0.19)
    assert gap(between, 0.7) == 0.0


@pytest.mark.parametrize("values, expected", [
    ({"smollm2": 5.0, "gemma3-270m": 3.0, "qwen2.5-0.5b": 2.0, "qwen2.5-1.5b": 1.5}, "closes"),
    ({"smollm2": 5.0, "gemma3-270m": 3.0, "qwen2.5-0.5b": 0.9, "qwen2.5-1.5b": 0.5}, "reached"),
    # the largest gap is under half, but the same-family step widens it: not "closes"
    ({"smollm2": 5.0, "gemma3-270m": 3.0, "qwen2.5-0.5b": 1.2, "qwen2.5-1.5b": 2.0}, "no trend"),
    ({"smollm2": 2.0, "gemma3-270m": 3.0, "qwen2.5-0.5b": 4.0, "qwen2.5-1.5b": 5.0}, "opens"),
    ({"smollm2": 0.5, "gemma3-270m": 3.0, "qwen2.5-0.5b": 4.0, "qwen2.5-1.5b": 5.0}, "opens"),
    ({"smollm2": 5.0, "gemma3-270m": 4.0, "qwen2.5-0.5b": 4.5}, "no trend"),
    ({"smollm2": 5.0}, "not run"),
    ({"gemma3-270m": 5.0, "qwen2.5-0.5b": 0.5}, "not run"),  # no SmolLM2 point to compare with
])
def test_the_verdict_follows_the_rules(values, expected):
    # band: below 1.0, so the gap is value - 1 above it
    assert verdict(_item(), values)[0] == expected


def test_a_trend_claim_rises_only_with_rank_correlation_and_the_family_step():
    trend = _item(id="2.10", kind="trend", band={"kind": "between", "lo": 0.41, "hi": 0.63})
    up = {"smollm2": 0.40, "gemma3-270m": 0.45, "qwen2.5-0.5b": 0.50, "qwen2.5-1.5b": 0.55}
    assert verdict(trend, up)[0] == "rises"
    swapped = {**up, "qwen2.5-1.5b": 0.48}  # one swap: rho 0.8, but the 1.5B is below the 0.5B
    assert verdict(trend, swapped)[0] == "no trend"
    assert verdict(trend, {"smollm2": 0.52, "gemma3-270m": 0.40})[0] == "not run"
    down = {"smollm2": 0.52, "gemma3-270m": 0.40, "qwen2.5-0.5b": 0.45, "qwen2.5-1.5b": 0.50}
    v, why = verdict(trend, down)
    assert v == "no trend" and "Spearman" in why


def test_an_items_own_ladder_reads_its_two_largest_sizes_as_the_family_step():
    own = _item(id="3.27", models=["byte-d128x4", "byte-d192x8", "byte-d256x8"],
                band={"kind": "below", "threshold": 0.0})
    assert family_step(own) == ("byte-d192x8", "byte-d256x8") and family_step(_item()) == FAMILY_STEP
    # the largest gap is under half of the first, but d192 -> d256 widens it: not "closes"
    widened = {"byte-d128x4": 0.10, "byte-d192x8": 0.01, "byte-d256x8": 0.04}
    assert verdict(own, widened)[0] == "no trend"
    assert verdict(own, {**widened, "byte-d256x8": 0.005})[0] == "closes"
    # the registry ladder's Qwen step does not apply to a from-scratch ladder, nor the other way round
    assert verdict(_item(), {"smollm2": 5.0, "qwen2.5-0.5b": 1.2, "qwen2.5-1.5b": 2.0})[0] == "no trend"


def test_the_shipped_criteria_name_report_items_rungs_and_commands():
    ladder = load_ladder()
    ids = {it.id for p in load_items() for it in p.items}
    assert {it.id for it in ladder.items} <= ids
    for it in ladder.items:
        assert it.models and it.command and it.budget, it.id
        if it.kind == "training":
            assert "qwen2.5-0.5b" in it.models, it.id  # training items run at least on the 0.5B
        if it.kind in ("inference", "trend"):
            assert list(it.models) == list(RUNGS), it.id  # inference-only items climb the whole ladder
    # the items the report blames on size, each with a criterion
    blamed = {"1.11", "1.12", "1.13", "1.14", "1.15", "1.24", "2.17", "3.10", "3.14", "3.17", "3.19", "3.21",
              "3.22", "3.23", "3.27", "3.34", "3.35", "3.36"}
    assert blamed <= {it.id for it in ladder.items}


def test_the_report_section_reads_each_rung(tmp_path):
    folder = tmp_path / "docs" / "results" / "ladder" / "deficit"
    folder.mkdir(parents=True)
    for m, v in zip(RUNGS, (0.52, 0.40, 0.45, 0.50), strict=True):
        rows = [{"table": "layers", "layer": i, "metric": "deficit", "mean": v} for i in range(3)]
        (folder / f"{m}.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    results = evaluate_ladder(load_ladder(), tmp_path)
    deficit = next(r for r in results if r.item.id == "2.10")
    assert deficit.values == pytest.approx({"smollm2": 0.52, "gemma3-270m": 0.40, "qwen2.5-0.5b": 0.45,
                                            "qwen2.5-1.5b": 0.50})
    assert deficit.verdict == "no trend"
    text = "\n".join(ladder_markdown(results))
    assert "| 2.10 |" in text and "0.52 | 0.4 | 0.45 | 0.5 | no trend" in text
    assert all(r.verdict == "not run" for r in results if r.item.id != "2.10")
