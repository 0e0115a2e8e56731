"""Statuses are computed from numbers: each status is reached from synthetic files by the rule the report
states, a verdict a results file carries never changes a status, and every shipped item that reproduces tests
the numbers the paper states against the paper's own bounds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from geosteer_paper.reproduction import evaluate_item, evaluate_items, load_items
from geosteer_paper.reproduction.checks import CHECKS_FILE
from geosteer_paper.reproduction.items import Item

REPO = Path(__file__).resolve().parents[3]
Q = "the paper's sentence"


def _crit(**kw) -> dict:
    return {"claim": Q, **kw}


# the headline below the paper's 2.0, tested against the paper's number too (a magnitude)
HEAD = [_crit(kind="below", value="x", threshold=2.0), _crit(kind="below", value="x", threshold=2.0, role="magnitude")]


def _item(**over) -> Item:
    base = {"id": "1.1", "name": "n", "claim": "c", "results_file": "r.json", "reading": "r",
            "ours": {"x": {"path": "x"}, "y": {"path": "y"}, "se": {"path": "se"}, "p": {"path": "p"}},
            "criteria": HEAD, "paper_numbers": [2.0]}
    return Item.model_validate({**base, **over})


def _status(tmp_path: Path, values: dict, **over) -> tuple[str, str]:
    (tmp_path / "r.json").write_text(json.dumps({"x": 0.0, "y": 0.0, "se": 0.0, "p": 0.0, **values}))
    r = evaluate_item("p", _item(**over), [tmp_path])
    return r.status, r.why


def test_each_status_follows_from_the_numbers(tmp_path):
    magnitude = _crit(kind="between", value="y", lo=0.41, hi=0.63, role="magnitude")
    nums = {"paper_numbers": [0.41, 0.63]}
    headline = [_crit(kind="below", value="x", threshold=2.0)]
    assert _status(tmp_path, {"x": 1.0, "y": 0.5}, criteria=headline + [magnitude], **nums)[0] == "reproduces"
    assert _status(tmp_path, {"x": 1.0, "y": 0.8}, criteria=headline + [magnitude], **nums)[0] == "partial"
    assert _status(tmp_path, {"x": 3.0, "y": 0.5}, criteria=headline + [magnitude], **nums)[0] == "diverges"
    # the paper states numbers but no criterion tests them: direction only, so partial at best
    st, why = _status(tmp_path, {"x": 1.0, "y": 0.5}, criteria=headline, **nums)
    assert st == "partial" and "tested by no criterion" in why
    assert _status(tmp_path, {"x": 1.0}, criteria=headline, untested=["the redirect, not judged"])[0] == "partial"
    part = _crit(kind="above", value="y", threshold=0.0, role="part")
    assert _status(tmp_path, {"x": 1.0, "y": -1.0}, criteria=headline + [part])[0] == "partial"
    for kind, status in [("future work", "goes beyond"), ("limitation", "goes beyond"),
                         ("extension", "goes beyond"), ("procedure", "definition")]:
        assert _status(tmp_path, {"x": 1.0}, claim_kind=kind)[0] == status
    assert _status(tmp_path, {"x": 1.0}, claim_kind="future work", results_file=None, ours={},
                   criteria=[])[0] == "not run"


def test_inconclusive_within_two_standard_errors_or_above_the_p_threshold(tmp_path):
    # |0.91 - 0.84| = 0.07 against the paper's 0.015: 0.055 past the band; 2 s.e. = 0.094 -> undecided
    close = [_crit(kind="close", values=["x", "y"], band=0.015, se=["se"], role=role)
             for role in ("claim", "magnitude")]
    nums = {"paper_numbers": [0.015]}
    assert _status(tmp_path, {"x": 0.91, "y": 0.84, "se": 0.047}, criteria=close, **nums)[0] == "inconclusive"
    assert _status(tmp_path, {"x": 0.91, "y": 0.84, "se": 0.02}, criteria=close, **nums)[0] == "diverges"
    assert _status(tmp_path, {"x": 0.91, "y": 0.90, "se": 0.001}, criteria=close, **nums)[0] == "reproduces"
    order = [_crit(kind="order", values=["x", "y"], p="p")] + HEAD
    assert _status(tmp_path, {"x": 0.857, "y": 0.847, "p": 0.58}, criteria=order)[0] == "inconclusive"
    assert _status(tmp_path, {"x": 0.857, "y": 0.847, "p": 0.01}, criteria=order)[0] == "diverges"


def test_a_verdict_in_the_results_file_never_changes_a_status(tmp_path):
    crit = HEAD
    for flags in ({"pass": False}, {"pass": True}, {"reproduces": False, "status": "diverges"}):
        assert _status(tmp_path, {"x": 1.0, **flags}, criteria=crit)[0] == "reproduces"
        assert _status(tmp_path, {"x": 5.0, **flags}, criteria=crit)[0] == "diverges"
    # a criterion may not read a true/false field as if it were a measurement
    (tmp_path / "r.json").write_text(json.dumps({"x": 1.0, "pass": True}))
    flag = evaluate_item("p", _item(ours={"x": {"path": "pass"}}), [tmp_path])
    assert flag.status == "not run" and "flag" in flag.why


@pytest.mark.parametrize("error, tolerance, flag, status", [
    (5.0, 1e-6, True, "diverges"),  # the recorded error is 5e6 times the tolerance, whatever the flag says
    (1e-7, 1e-6, False, "reproduces"),
    (float("nan"), 1e-6, True, "diverges"),
    ("5", 1e-6, True, "diverges"),
    (None, 1e-6, True, "diverges"),
])
def test_check_items_take_their_status_from_error_and_tolerance(tmp_path, error, tolerance, flag, status):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    row = {"item": "1.2", "check": "c", "family": "llama", "max_abs_error": error, "tolerance": tolerance,
           "pass": flag}
    (tmp_path / CHECKS_FILE).write_text(json.dumps({"rows": [row]}))
    item = Item(id="1.2", name="n", claim="c", reading="r", check=True)
    assert evaluate_item("p", item, [tmp_path]).status == status


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _quoted(x: float, quotes: list[str]) -> bool:
    """Whether |x| is written in one of the quotes, as is or as a percentage."""
    quotes = [re.sub(r"\bthe one\b", "the 1", q) for q in quotes]
    quotes = [re.sub(r"(\d+(?:\.\d+)?)M\b", lambda m: f"{float(m.group(1)) * 1e6:.0f}", q) for q in quotes]
    found = [float(n) for q in quotes for n in _NUMBER.findall(q.replace(",", ""))]
    return any(abs(abs(x) - n) <= 1e-9 * max(1.0, n) or abs(abs(x) * 100 - n) <= 1e-7 * max(1.0, n)
               for n in found)


# Reproducing items whose paper value has digits that are not a number to test, and why.
NUMBERS_NOT_TESTED = {
    "1.5": "the paper's 121 per surface and 0.3 % are for its own models; geosteer's count is arithmetic",
    "1.19": "the single-surface change (1/10, KL ~1e-4) is read as 'small': greedy 0-2 of 10, KL below 1e-3",
    "1.21": "5-10 and 0-4 name the edited rows, not outcomes",
    "3.11": "'~10^4 PPL' is read as catastrophic: above 1,000",
    "3.24": "'< 1' reads 'small relative to the residual stream' (no number in the paper)",
    "2.22": "(1, 1) names the operating point whose minimality is tested, not a measured value",
}


def test_reproducing_items_test_the_numbers_the_paper_states():
    results = evaluate_items(load_items(), [REPO])
    for r in results:
        it = r.item
        quotes = [c.claim for c in it.criteria]
        for x in it.paper_numbers:  # the numbers an item carries are the paper's: written in its quotes
            assert _quoted(x, quotes), (it.id, x)
        if r.status != "reproduces" or it.check:
            continue
        magnitude = [c for c in it.criteria if c.role == "magnitude"]
        if it.paper_numbers:
            assert magnitude, f"item {it.id} reproduces without a magnitude criterion for {it.paper_numbers}"
            for c in magnitude:
                assert all(any(abs(b - n) < 1e-12 for n in it.paper_numbers) for b in c.bounds()), it.id
        digits = _NUMBER.findall(re.sub(r"(Eq|Eqs|Table|Tables|Fig|Figs|Thm|Lemma|Cor|Prop)\.? ?[\d–, ]+", "",
                                        str(it.paper_value or "")))
        if digits and not it.paper_numbers:
            assert it.id in NUMBERS_NOT_TESTED, (
                f"item {it.id} reproduces, its paper value {it.paper_value!r} states a number, and it carries "
                "no paper_numbers for a magnitude criterion")


def test_a_criterion_against_geosteer_itself_never_reproduces(tmp_path):
    # the parameter-overhead item: geosteer's own count compared with geosteer's own count
    own = [_crit(kind="equals", value="x", ref=2090880.0, against="self")]
    st, why = _status(tmp_path, {"x": 2090880.0}, criteria=own + HEAD[1:])
    assert st == "partial" and "compares geosteer with itself" in why and "against geosteer itself" in why
    assert _status(tmp_path, {"x": 5.0}, criteria=own[:0] + HEAD)[0] == "diverges"
    # an equality with a number the paper does not state must say whose number it is
    with pytest.raises(ValueError, match="not one of paper_numbers"):
        _item(criteria=[_crit(kind="equals", value="x", ref=2090880.0)])


def test_an_item_that_quotes_a_procedure_is_a_definition(tmp_path):
    # criteria that only test the run's setup against the paper's procedure (a token budget, a context)
    setup = [_crit(kind="within_rel", value="x", ref=1.28e6, band=0.2, role="setup"),
             _crit(kind="equals", value="y", ref=128, role="setup")]
    nums = {"paper_numbers": [1.28e6, 128]}
    for x in (262144.0, 1.28e6):  # whether the setup matches or not, the item states no finding
        st, why = _status(tmp_path, {"x": x, "y": 128}, criteria=setup, **nums)
        assert st == "definition" and why.startswith("the paper states a procedure")
    # a failed setup beside a holding headline is a partial, never a divergence
    st, why = _status(tmp_path, {"x": 1.0, "y": 64}, criteria=HEAD + setup[1:], paper_numbers=[2.0, 128])
    assert st == "partial" and "fails (setup)" in why
    with pytest.raises(ValueError, match="setup criterion bound"):
        _item(criteria=setup, paper_numbers=[128])


def test_an_item_without_a_paper_number_is_at_most_partial(tmp_path):
    st, why = _status(tmp_path, {"x": 1.0}, criteria=HEAD[:1], paper_numbers=[])
    assert st == "partial" and "states no number" in why
    assert _status(tmp_path, {"x": 5.0}, criteria=HEAD[:1], paper_numbers=[])[0] == "diverges"
    # a formula's number is its identity: an exact relation tested to a tolerance may reproduce
    assert _status(tmp_path, {"x": 1.0}, criteria=HEAD[:1], paper_numbers=[], claim_kind="formula")[0] == "reproduces"


def test_shipped_items_that_reproduce_state_a_paper_number_and_compare_with_it():
    for r in evaluate_items(load_items(), [REPO]):
        if r.status == "reproduces" and not r.item.check:
            assert r.item.paper_numbers or r.item.claim_kind == "formula", r.item.id
            assert all(c.against == "paper" for c in r.item.criteria), r.item.id
    five = {r.item.id: r for r in evaluate_items(load_items(), [REPO])}["1.5"]
    assert five.status != "reproduces"


def test_the_guard_fails_on_a_direction_only_item(tmp_path):
    # the rule the shipped-items test relies on: numbers stated, none tested -> never "reproduces"
    st, _ = _status(tmp_path, {"x": 11.58, "y": 12.92}, paper_numbers=[-2.49, -1.99],
                    criteria=[_crit(kind="order", values=["x", "y"])])
    assert st == "partial"


def test_every_criterion_of_the_shipped_items_quotes_a_sentence():
    for p in load_items():
        for it in p.items:
            for c in it.criteria:
                assert len(c.claim) >= 20, (it.id, c.claim)
