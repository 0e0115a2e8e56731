"""Bundled prompt sets: shape, coverage and loading errors."""

from __future__ import annotations

import json

import pytest

from geosteer.errors import GeosteerError
from geosteer.eval.prompts import by_category, load_prompts, prompt_sets


def test_bundled_sets_exist():
    assert {"manifold_prompts", "steering_prompts", "wall_prompts"} <= set(prompt_sets())


def test_manifold_prompts_cover_at_least_100_prompts_over_10_categories():
    ps = load_prompts("manifold_prompts")
    groups = by_category(ps)
    assert len(ps) >= 100 and len(groups) >= 10
    assert {"ambiguous", "polysemous", "science", "technical", "code", "creative", "reasoning"} <= set(groups)
    assert len({p.text for p in ps}) == len(ps)  # no duplicates
    assert all(p.text.strip() for p in ps)


def test_steering_and_wall_sets():
    assert len(load_prompts("steering_prompts")) == 10
    walls = load_prompts("wall_prompts")
    unsafe = {p.extra["pair"] for p in walls if p.category == "unsafe"}
    safe = {p.extra["pair"] for p in walls if p.category == "safe"}
    assert unsafe == safe and len(unsafe) >= 3  # every unsafe prompt has its matched control


def test_category_filter_and_errors(tmp_path):
    assert {p.category for p in load_prompts("manifold_prompts", ["code"])} == {"code"}
    with pytest.raises(GeosteerError, match="valid:"):
        load_prompts("manifold_prompts", ["nope"])
    with pytest.raises(GeosteerError, match="bundled"):
        load_prompts("no_such_set")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"items": []}))
    with pytest.raises(GeosteerError, match="not a prompt set"):
        load_prompts(bad)
    ok = tmp_path / "mine.json"
    ok.write_text(json.dumps(["a prompt", {"category": "x", "text": "another"}]))
    assert [p.text for p in load_prompts(ok)] == ["a prompt", "another"]
