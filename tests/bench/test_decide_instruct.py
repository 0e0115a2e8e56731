"""``bench decide --design instruct``: a concept file's concepts alone, sized for an instruction-tuned model (the
decision levels, one seed, a short step cap, the dev phase on one dev concept with per-lever grids); its cost by
the documented formula, its honest MDE, and the combinations it refuses before any model loads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.bench.test_decide_inputs import _decide, models_here  # noqa: F401 - a fixture used below
from tests.cli_helpers import forbid_model_builds, run_cli

NAMES = ("warm", "terse", "ornate")


def _file(path, names=NAMES, n: int = 60) -> None:
    """A hand-made concept file of promoted concepts (enough texts and prompts for bench decide)."""
    path.write_text(json.dumps([{"name": name, "direction": "promote", "description": f"the {name} style",
                                 "positive": [f"{name} positive text number {i} about things" for i in range(n)],
                                 "negative": [f"{name} negative text number {i} about stuff" for i in range(n)],
                                 "prompts": [f"Request {i} of {name}?" for i in range(40)]} for name in names]))


def _dry(monkeypatch, capsys, tmp_path, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    return run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--design", "instruct", *args)


@pytest.mark.parametrize("model", ["tiny-llama", "qwen2.5-1.5b"])
def test_the_instruct_design_takes_the_files_concepts_alone(monkeypatch, capsys, tmp_path, model):
    """No bundled concept is added (no topics, no templated ones): the file's 3 concepts, one seed, the two
    decision levels; the unit is the test prompt, so the predicted MDE is the prompt-level t formula at P = 32
    prompts (df 31), one reading each and 3 x 54 claims, with the design's prompt-level priors; below the largest
    gain measured, so the dry run gives no warning."""
    stats = pytest.importorskip("scipy.stats")
    _file(tmp_path / "c.json")
    code, out, err = _dry(monkeypatch, capsys, tmp_path, "--model", model, "--concepts", "c.json", "--json")
    assert code == 0, err
    doc = json.loads(out)
    d = doc["design"]
    assert doc["concepts"] == 3 and d["kinds"] == ["file-promote", "file-suppress"]
    assert d["seeds"] == [0] and d["kl_levels"] == [0.05, 0.2] and d["extra"]["dev_concepts"] == ["people"]
    assert d["extra"]["unit"] == "prompt" and doc["unit"] == "prompt"
    p, m = d["test_prompts"], doc["comparisons"]
    assert doc["prompts_per_concept"] == p == 32 and doc["readings_per_prompt"] == 1
    sd = np.sqrt(d["extra"]["prior_sd_prompt"] ** 2 + d["extra"]["prior_sd_seed"] ** 2)
    want = (stats.t.ppf(1 - 0.05 / m / 2, p - 1) + stats.t.ppf(0.8, p - 1)) * sd / np.sqrt(p)
    assert m == 3 * 54 and doc["minimum_detectable_effect"] == pytest.approx(want, rel=1e-6) and want < 0.149
    assert doc["power"] is None
    code, out, err = _dry(monkeypatch, capsys, tmp_path, "--model", model, "--concepts", "c.json")
    assert code == 0, err
    assert out.startswith("3 concepts x 32 prompts x 1 seed x 2 KL levels, 162 comparisons (Holm); the unit is "
                          "the test prompt: 32 distinct prompts per concept, t with 31 df per concept")
    assert "\nwarning:" not in out
    assert "from c.json: warm, terse, ornate of the 3 test concepts" in out
    assert "without --concepts-only" not in out  # the design runs the file alone: no bundled alternative


def test_a_small_mde_carries_no_warning_and_a_middling_one_names_the_largest_measured_gain():
    from geosteer.bench.cli_decide import power_note
    from geosteer.bench.design import LARGEST_MEASURED_GAIN

    assert power_note(0.07, 18) is None and power_note(LARGEST_MEASURED_GAIN, 9) is None
    assert f"above {LARGEST_MEASURED_GAIN:g}" in power_note(0.3, 5) and "cannot" not in power_note(0.3, 5)
    assert "cannot detect" in power_note(1.0, 3)


def _hours(design, concepts: int, dev_extended: bool = False) -> float:
    """The documented estimate, computed here from the committed costs: per lever and (concept, seed), a learned
    lever's training x (steps x batch) / 64 x (1 + 0.3 / kl_every) plus its rest, of which the readings of the
    test prompts (prompting's whole cost, 10.9 CPU-s, per level) scale by levels x prompts / 16 and the rest by
    levels / 2; CAA's rest likewise; prompting's cost x prompts / 16; the context plus one reading x (prompts -
    16) / 16; the dev phase at one level on 16 prompts, each learned lever at each rate of its grid (3 more rates
    each when extended) on each dev concept; CPU-seconds / 3600 (no walls: no suppressed concept)."""
    from geosteer.bench.decide_cost import COMMITTED, COMMITTED_CONTEXT

    learned = ("vector", "loreft", "lora", "surfaces-rank1")
    read = COMMITTED["prompting"][0]

    def lever(name: str, levels: int, prompts: int) -> float:
        total, train = COMMITTED[name]
        if name == "prompting":  # one setting: its one reading scales with the prompts alone
            return total * prompts / 16
        if name in learned:
            train *= design.steps * design.batch_texts / 64 * (1 + 0.3 / design.kl_every)
        return train + read * levels * prompts / 16 + (total - COMMITTED[name][1] - 2 * read) * levels / 2

    levels, n_dev, p = len(design.kl_levels), len(design.dev_concepts()), design.test_prompts
    test = len(design.seeds) * concepts * (COMMITTED_CONTEXT + read * (p - 16) / 16 + sum(
        lever(x, levels, p) for x in ("prompting", "caa", *learned)))
    dev = n_dev * COMMITTED_CONTEXT + sum(
        (len(design.grid(x)) + (3 if dev_extended else 0)) * n_dev * lever(x, 1, 16) for x in learned)
    return (test + dev) / 3600, dev / 3600


def test_the_estimate_scales_as_documented():
    from dataclasses import replace

    from geosteer.bench.cli_decide import dry_run
    from geosteer.bench.decide_models import FORWARD_RATIO
    from geosteer.bench.design import DESIGNS, SMOLLM2_LRS

    design = DESIGNS["instruct"]
    for lever, lr in SMOLLM2_LRS.items():  # each learned lever's grid: SmolLM2's choice and x3 either side
        assert design.grid(lever) == pytest.approx((lr / 3, lr, lr * 3))
    assert design.grid("surfaces-rank2") == design.lr_grid  # an exploratory form: the design's grid
    for d, c in ((design, 2), (design, 3), (replace(design, steps=24, seeds=(0, 1)), 3),
                 (replace(design, test_prompts=16), 3), (replace(design, test_prompts=48), 1),
                 (replace(design, extra={**design.extra, "lr_grids": {"lora": [1e-4, 1e-3, 1e-2, 1e-1]}}), 3)):
        cost = dry_run(d, c, 0)["cost"]
        total, dev = _hours(d, c)
        assert cost["cpu_hours"] == pytest.approx(total, abs=0.011)
        assert cost["dev_cpu_hours"] == pytest.approx(dev, abs=0.006)
        assert cost["dev_extended_cpu_hours"] == pytest.approx(_hours(d, c, True)[1], abs=0.006)
    small, big = dry_run(design, 3, 0)["cost"], dry_run(design, 3, 0, model="qwen2.5-1.5b")["cost"]
    assert big["model_factor"] == FORWARD_RATIO["qwen2.5-1.5b"]
    for key in ("cpu_hours", "dev_cpu_hours", "test_cpu_hours", "dev_extended_cpu_hours"):
        assert big[key] == pytest.approx(small[key] * FORWARD_RATIO["qwen2.5-1.5b"], abs=0.1)
    # the trimmed design is as it was: four dev concepts, one grid for every lever
    trimmed = DESIGNS["trimmed"]
    assert trimmed.dev_concepts() == ("people", "no-people", "no-mathematics", "no-everyday-life")
    assert trimmed.grid("lora") == trimmed.lr_grid and not trimmed.file_only and design.file_only


@pytest.mark.parametrize("args,needles", [
    ([], ["--design instruct: give --concepts FILE"]),
    (["--concepts", "c.json", "--only", "arts"], ["unknown concept 'arts'"]),  # no bundled concept
])
@pytest.mark.parametrize("mode", [["--dry-run"], ["--out", "run"]])
def test_bad_combinations_are_one_line_before_any_model_loads(monkeypatch, capsys, tmp_path, args, needles, mode,
                                                              models_here):  # noqa: F811
    from geosteer.bench import decide_driver

    def never(*a, **k):  # a run that got this far would start worker processes that load models
        raise AssertionError("the run started")

    monkeypatch.setattr(decide_driver, "run_all", never)
    _file(tmp_path / "c.json")
    _file(tmp_path / "one.json", names=("warm",))
    err = _decide(monkeypatch, capsys, tmp_path, "--design", "instruct", *mode, *args)
    assert all(n in err for n in needles), err
    assert "drop --concepts-only" not in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("recorded,running", [("trimmed", "instruct"), ("instruct", "trimmed")])
def test_a_folder_of_one_design_refuses_the_other(tmp_path, recorded, running):
    from geosteer.bench.cli_decide import _prepare
    from geosteer.bench.decide_folder import record_state
    from geosteer.bench.design import DESIGNS, STATE_FILE
    from geosteer.errors import GeosteerError

    _file(tmp_path / "c.json")
    have = _prepare(tmp_path / "run", "qwen2.5-0.5b", "smollm2", tmp_path / "c.json", DESIGNS[recorded], (), (0,),
                    False, False)
    record_state(tmp_path / "run", STATE_FILE, have["want"], None)
    again = _prepare(tmp_path / "run", "qwen2.5-0.5b", "smollm2", tmp_path / "c.json", DESIGNS[recorded], (),
                     (0,), False, False)
    assert again["have"]["design"] == json.loads(json.dumps(DESIGNS[recorded].to_dict()))  # it resumes
    with pytest.raises(GeosteerError, match="holds a run of another design: design"):
        _prepare(tmp_path / "run", "qwen2.5-0.5b", "smollm2", tmp_path / "c.json", DESIGNS[running], (), (0,),
                 False, False)


@pytest.mark.parametrize("name", ["instruct", "trimmed"])
def test_the_dev_phase_runs_on_the_designs_dev_concepts_and_grids_and_records_them(monkeypatch, tmp_path, name):
    """The dev phase trains each learned lever at each rate of its own grid on the design's dev concepts only
    (a stand-in scores each rate, best at SmolLM2's choice: no extension), and learning_rates.json records the
    dev concepts, each lever's grid and where it comes from; the trimmed design's record keeps its one grid."""
    from geosteer.bench import decide_driver as D
    from geosteer.bench.design import DESIGNS, SMOLLM2_LRS

    design = DESIGNS[name]
    seen = []

    def job(args):
        _, concept, lever, lr = args
        seen.append((concept, lever, lr))
        best = SMOLLM2_LRS[lever] if name == "instruct" else 1e-2
        return concept, lever, lr, -abs(np.log(lr / best)), 4

    monkeypatch.setattr(D, "_dev_job", job)
    spec = D.RunSpec("tiny-llama", str(tmp_path), design.to_dict())
    chosen, cap = D.choose_lrs(spec, 1)
    assert {c for c, _, _ in seen} == set(design.dev_concepts())
    assert len(seen) == len(design.dev_concepts()) * sum(len(design.grid(lv)) for lv in chosen)
    doc = json.loads((tmp_path / "learning_rates.json").read_text())
    assert doc["dev_concepts"] == list(design.dev_concepts()) and cap == doc["step_cap"]["cap"]
    if name == "instruct":
        assert chosen == pytest.approx(SMOLLM2_LRS) and doc["dev_concepts"] == ["people"]
        assert doc["grid"] == {lv: pytest.approx([lr / 3, lr, lr * 3]) for lv, lr in SMOLLM2_LRS.items()}
        assert "SmolLM2" in doc["criterion"]
    else:
        assert doc["grid"] == list(design.lr_grid) and "grid:" not in doc["criterion"]
        assert chosen == dict.fromkeys(SMOLLM2_LRS, 1e-2)
