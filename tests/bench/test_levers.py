"""Every lever: neutral at strength 0 (stock logits), it moves the model at strength 1, and the one
operating-point rule is applied to each of them (LoReFT's formula is tested with its method, tests/loreft)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from geosteer.bench.catalog import DEFAULT_LEVERS, levers
from geosteer.bench.concepts import read_concepts, split_concept, toward_away
from geosteer.bench.prompts import format_prompt, neutral_prompts, train_prompts
from geosteer.bench.registry import Setup
from geosteer.interventions import steer
from tests.bench.conftest import TINY

IDS = torch.tensor([[1, 45, 230, 87, 12, 600, 33, 9]])


def _logits(model, ivs=()):
    with torch.no_grad(), steer(model, *ivs):
        return model(input_ids=IDS).logits


def _setup(model, tok, concept_file, tmp_path):
    c = read_concepts(concept_file)[0]
    toward, away = toward_away(c, split_concept(c))
    return Setup(model=model, tok=tok, concept=c, toward=toward, away=away,
                 train_prompts=[format_prompt(tok, p, False) for p in train_prompts()[:2]],
                 train_controls=list(neutral_prompts()[0][:2]), budget=TINY, chat=False, seed=0, work=tmp_path)


def test_every_lever_is_neutral_at_strength_0_and_acts_at_1(tiny_model, concept_file, tmp_path):
    model, tok = tiny_model("llama")
    stock = _logits(model)
    s = _setup(model, tok, concept_file, tmp_path)
    assert set(DEFAULT_LEVERS) <= set(levers())
    for name in DEFAULT_LEVERS:
        prepared = levers()[name].build(s)
        try:
            for p in prepared.points:
                with p.interventions() as ivs:
                    got = _logits(model, ivs)
                if p.strength == 0.0:
                    torch.testing.assert_close(got, stock, atol=2e-5, rtol=0, msg=f"{name} at strength 0")
            moved = [p for p in prepared.points if p.strength > 0]
            assert moved, name
            if name not in ("prompting", "walls"):  # prompting acts on the prompt, walls may find none
                with moved[0].interventions() as ivs:
                    assert (_logits(model, ivs) - stock).abs().max() > 1e-4, name
        finally:
            prepared.cleanup()
        torch.testing.assert_close(_logits(model), stock, atol=0, rtol=0, msg=f"{name} left the model changed")


def test_one_rule_chooses_every_levers_operating_point(tiny_model, concept_file, tmp_path, monkeypatch):
    import geosteer.bench.run as run
    from geosteer.bench.operating import choose_operating_point

    calls = []

    def spy(summaries, kl_budget):
        calls.append((len(summaries), kl_budget))
        return choose_operating_point(summaries, kl_budget)

    monkeypatch.setattr(run, "choose_operating_point", spy)
    model, tok = tiny_model("llama")
    names = ["prompting", "caa", "vector", "ffn-gates"]
    cfg = run.BenchConfig(model="tiny-llama", levers=names, budget=TINY, kl_budget=0.3)
    doc = run.run_bench(model, tok, read_concepts(concept_file), cfg, tmp_path / "out")
    assert len(calls) == len(names) and {k for _, k in calls} == {0.3}
    assert [r["lever"] for r in doc["rows"]] == ["stock", *names]
    assert all(r["control_kl"]["mean"] <= 0.3 for r in doc["rows"])
    # a second run reads every (concept, lever) back from its checkpoint: nothing is built again
    monkeypatch.setattr(run, "prepare_concept", lambda *a, **k: pytest.fail("rebuilt"))
    again = run.run_bench(model, tok, read_concepts(concept_file), cfg, tmp_path / "out")
    assert json.dumps(again["rows"]) == json.dumps(doc["rows"])  # (NaN intervals of one prompt compare as text)


def test_a_failing_lever_is_recorded_and_the_others_go_on(tiny_model, concept_file, tmp_path, monkeypatch):
    import geosteer.bench.registry as registry
    import geosteer.bench.run as run

    def boom(setup):
        raise RuntimeError("no luck")

    monkeypatch.setitem(registry._LEVERS, "boom", registry.Lever("boom", boom, "fails"))
    model, tok = tiny_model("llama")
    cfg = run.BenchConfig(model="tiny-llama", levers=["boom", "prompting"], budget=TINY)
    doc = run.run_bench(model, tok, read_concepts(concept_file), cfg, tmp_path / "out")
    assert [r["lever"] for r in doc["rows"]] == ["stock", "prompting"]
    assert doc["failed"] == [{"concept": "cats", "lever": "boom", "error": "RuntimeError: no luck"}]
    assert not (tmp_path / "out" / "cache" / "cats" / "boom.json").exists()


def test_cached_only_assembles_what_the_checkpoints_hold(tiny_model, concept_file, tmp_path, monkeypatch):
    import geosteer.bench.run as run

    model, tok = tiny_model("llama")
    cfg = run.BenchConfig(model="tiny-llama", levers=["prompting"], budget=TINY)
    run.run_bench(model, tok, read_concepts(concept_file), cfg, tmp_path / "out")
    monkeypatch.setattr(run, "prepare_concept", lambda *a, **k: pytest.fail("measured"))
    more = run.BenchConfig(model="tiny-llama", levers=["prompting", "caa"], budget=TINY, cached_only=True)
    doc = run.run_bench(model, tok, read_concepts(concept_file), more, tmp_path / "out")
    assert [r["lever"] for r in doc["rows"]] == ["stock", "prompting"] and doc["meta"]["cached_only"]


def test_surfaces_shipped_starts_from_the_given_surfaces(tiny_model, concept_file, tmp_path):
    from geosteer.manifold import load
    from tests.conftest import random_bank

    model, tok = tiny_model("llama")
    random_bank(model, scale=0.2).save(tmp_path / "shipped")
    shipped = _logits(model, [load(tmp_path / "shipped", model=model)])
    s = _setup(model, tok, concept_file, tmp_path)
    s.surfaces = str(tmp_path / "shipped")
    prepared = levers()["surfaces-shipped"].build(s)
    zero = [p for p in prepared.points if p.strength == 0.0]
    assert len(zero) >= 1
    with zero[0].interventions() as ivs:
        torch.testing.assert_close(_logits(model, ivs), shipped, atol=2e-5, rtol=0)



def test_a_levers_row_does_not_depend_on_what_ran_before_it(tiny_model, concept_file, tmp_path):
    """A resumed run builds a lever without the levers before it (LoRA's adapters are drawn at random): its
    row is the uninterrupted run's."""
    import geosteer.bench.run as run

    model, tok = tiny_model("llama")
    concepts = read_concepts(concept_file)

    def rows(names: list[str], out: str, noise: int) -> dict:
        torch.manual_seed(noise)
        torch.rand(noise)  # another global random state each time
        cfg = run.BenchConfig(model="tiny-llama", levers=names, budget=TINY)
        doc = run.run_bench(model, tok, concepts, cfg, tmp_path / out)
        return {r["lever"]: json.dumps({k: r[k] for k in ("strength", "score", "control_kl", "examples")})
                for r in doc["rows"]}

    whole = rows(["vector", "lora", "loreft"], "whole", 3)
    assert rows(["lora"], "lora", 11)["lora"] == whole["lora"]
    assert rows(["loreft"], "loreft", 17)["loreft"] == whole["loreft"]


@pytest.mark.parametrize(("name", "key", "strength_key"), [("vector", "vectors", "vector_scale"),
                                                          ("loreft", "loreft", "loreft_strength")])
def test_learned_levers_are_their_methods_artifacts_at_one_strength(tiny_model, concept_file, tmp_path, name, key,
                                                                     strength_key):
    """The vector and LoReFT levers are saved as their methods' artifacts; each point is the recipe of that
    artifact at the point's strength (s = 1: the object as trained, loaded with ``geosteer.load``)."""
    import geosteer
    from geosteer.recipe import InterventionSpec

    model, tok = tiny_model("llama")
    prepared = levers()[name].build(_setup(model, tok, concept_file, tmp_path))
    for p in prepared.points:
        with p.interventions() as ivs:
            (spec,) = ivs
        assert isinstance(spec, InterventionSpec) and getattr(spec, strength_key) == p.strength
    folder = getattr(spec, key)
    trained = geosteer.load(folder, model=model)
    one = next(p for p in prepared.points if p.strength == 1.0)
    with one.interventions() as ivs:
        torch.testing.assert_close(_logits(model, ivs), _logits(model, [trained]), atol=0, rtol=0)


def test_builds_of_one_lever_sharing_a_work_folder_keep_their_own_artifacts(tiny_model, concept_file, tmp_path):
    """Builds at other rates or seeds share the work folder (also in parallel processes): each keeps its own
    artifact, and its cleanup removes only that."""
    from geosteer.bench import matched

    model, tok = tiny_model("llama")
    s = _setup(model, tok, concept_file, tmp_path)
    a, b = matched.build("vector", s, lr=0.05), matched.build("vector", s, lr=0.5)
    with a.at(1.0).interventions() as ia, b.at(1.0).interventions() as ib:
        (sa,), (sb,) = ia, ib
        assert sa.vectors != sb.vectors
        assert (_logits(model, ia) - _logits(model, ib)).abs().max() > 1e-6
    a.cleanup()
    assert not Path(sa.vectors).exists() and Path(sb.vectors).is_dir()
    b.cleanup()
    assert not Path(sb.vectors).exists()
