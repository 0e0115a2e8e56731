"""``bench decide --model/--reader``: any model, a reader of another family, both checked before any model loads;
a run folder holds one model and one reader; the dry run's estimate scales with the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import forbid_model_builds, one_line_exit_2, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _decide(monkeypatch, capsys, tmp_path, *args: str) -> str:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a Hub id is then neither cached nor reachable
    forbid_model_builds(monkeypatch)  # any model load raises: a refusal must come first
    code, _, err = run_cli(monkeypatch, capsys, "bench", "decide", *args)
    one_line_exit_2(code, err)
    return err


def _seal_state(out: Path, drop: tuple[str, ...] = ()) -> None:
    """A run folder of the default design on smollm2 read by gemma3-270m; ``drop``: keys it does not record."""
    from geosteer.bench.decide_concepts import file_digest, pool_record
    from geosteer.bench.decide_draw import record
    from geosteer.bench.decide_folder import record_state, state_doc
    from geosteer.bench.decide_run import LEVERS
    from geosteer.bench.design import STATE_FILE, Design

    doc = state_doc("smollm2", "gemma3-270m", {"source": "bundled", "sha256": file_digest("bundled")},
                    Design().to_dict(), list(LEVERS), [], [0], record(pool_record()))
    out.mkdir(parents=True, exist_ok=True)
    record_state(out, STATE_FILE, {k: v for k, v in doc.items() if k not in drop}, None)


@pytest.fixture
def bundled_here(monkeypatch):
    """Every bundled model counts as installed (their installation is tested on its own)."""
    from geosteer.models import loading

    monkeypatch.setattr(loading, "_bundled_here", lambda name: name in loading.BUNDLED)


@pytest.mark.parametrize("dry", [True, False])
@pytest.mark.parametrize("args,needle", [
    (["-m", "nosuch"], "needs the steered model 'nosuch': unknown model 'nosuch'; valid names: smollm2"),
    (["-m", "tiny-nosuch"], "unknown model 'tiny-nosuch'"),
    (["-m", "no/such"], "model 'no/such' is not in the local Hub cache and the model hub is not reachable"),
    (["-m", "missing.gguf"], "GGUF file not found: missing.gguf"),
    (["-m", "./nowhere"], "./nowhere: no such model folder or .gguf file"),
    (["-m", "tiny-qwen2", "--reader", "nosuch"], "needs the fluency reader 'nosuch': unknown model"),
    (["-m", "tiny-qwen2", "--reader", "tiny-qwen3"], "--reader tiny-qwen3: the fluency reader must be of another "
                                                     "model family than the steered model tiny-qwen2 (both qwen)"),
    (["-m", "tiny-llama", "--reader", "smollm2"], "(both llama); give another --reader, e.g. gemma3-270m"),
    (["-m", "qwen2.5-0.5b", "--reader", "qwen2.5-1.5b"], "(both qwen)"),
    (["-m", "gemma3-270m", "--reader", "tiny-gemma3"], "(both gemma)"),
])
def test_a_bad_model_or_reader_is_refused_before_any_load(monkeypatch, capsys, tmp_path, bundled_here, dry, args,
                                                          needle):
    err = _decide(monkeypatch, capsys, tmp_path, *(["--dry-run"] if dry else ["--out", "run"]), *args)
    assert needle in err
    assert not (tmp_path / "run").exists()



@pytest.mark.parametrize("dry", [True, False])
def test_a_gguf_model_that_is_a_fifo_is_refused_saying_so(monkeypatch, capsys, tmp_path, bundled_here, dry):
    import os

    os.mkfifo(tmp_path / "pipe.gguf")
    err = _decide(monkeypatch, capsys, tmp_path, *(["--dry-run"] if dry else ["--out", "run"]), "-m", "pipe.gguf")
    assert "needs the steered model 'pipe.gguf': pipe.gguf is not a regular file (a FIFO (named pipe))" in err
    assert not (tmp_path / "run").exists()

def test_the_default_reader_is_never_of_the_models_family():
    from geosteer.bench.decide_models import READER_BY_FAMILY, default_reader, family
    from geosteer.models.loading import known_names

    assert READER_BY_FAMILY == {"llama": "gemma3-270m", "gemma": "smollm2"}
    assert [default_reader(m) for m in ("smollm2", "gemma3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b")] == [
        "gemma3-270m", "smollm2", "smollm2", "smollm2"]
    for name in known_names():
        assert family(default_reader(name)) != family(name), name
    assert family("HuggingFaceTB/SmolLM2-135M-Instruct") == "llama"  # a bundled model's Hub id: its family


def test_the_readers_family_is_checked_again_once_both_are_loaded(monkeypatch):
    """A family not known before loading (an uncached Hub id) is checked on the loaded configs."""
    from geosteer.bench import decide_driver

    monkeypatch.setattr(decide_driver, "default_encoder", lambda: None)
    monkeypatch.setattr(decide_driver, "_LOADED", {})
    r = decide_driver.readers("tiny-qwen2", 1, "tiny-llama")
    assert (r.model.config.model_type, r.reader.config.model_type) == ("qwen2", "llama")
    monkeypatch.setattr(decide_driver, "family_of_type", lambda t: "same")  # as if both were one family
    with pytest.raises(Exception, match="another model family"):
        decide_driver.readers("tiny-mistral", 1, "tiny-llama")


@pytest.mark.parametrize("args,key,there", [
    (["-m", "tiny-qwen2"], "model", '"smollm2" there, "tiny-qwen2" here'),
    (["--reader", "tiny-gemma3"], "reader", '"gemma3-270m" there, "tiny-gemma3" here'),
])
@pytest.mark.parametrize("drop", [(), ("model", "reader")])
def test_a_resume_with_another_model_or_reader_is_refused(monkeypatch, capsys, tmp_path, bundled_here, args, key,
                                                          there, drop):
    _seal_state(tmp_path / "run", drop)
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", *args)
    assert f"--out run holds a run of another design: {key} {there}" in err


@pytest.mark.parametrize("drop", [(), ("model", "reader")])
@pytest.mark.parametrize("args", [[], ["-m", "HuggingFaceTB/SmolLM2-135M-Instruct", "--reader", "gemma3-270m"]])
def test_the_default_model_resumes_a_folder_of_it(monkeypatch, capsys, tmp_path, bundled_here, drop, args):
    """A folder written before the model and reader were options (no such keys) is the default's; the same
    weights by another name (the Hub id of smollm2) resume it too."""
    from geosteer.bench import decide_driver, decide_report
    from geosteer.models import loading

    monkeypatch.setattr(loading, "check_hub_source", lambda name, *a, **k: None)  # the Hub id counts as cached
    _seal_state(tmp_path / "run", drop)
    specs = []
    monkeypatch.setattr(decide_driver, "run_all", lambda spec, *a: specs.append(spec))
    monkeypatch.setattr(decide_report, "write_report", lambda out, design: {"markdown": "ok", "verdicts": {}})
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--out", "run", "--seed-list", "0", *args)
    assert code == 0, err
    assert [(s.model, s.reader) for s in specs] == [(args[1] if args else "smollm2", "gemma3-270m")]
    state = json.loads((tmp_path / "run" / "decide_state.json").read_text())
    assert (state["model"], state["reader"]) == (args[1] if args else "smollm2", "gemma3-270m")


def test_the_dry_run_estimate_scales_with_the_model(monkeypatch, capsys, tmp_path):
    from geosteer.bench.cli_decide import dry_run
    from geosteer.bench.design import Design

    small, qwen = (dry_run(Design(), 22, 8, model=m)["cost"] for m in ("smollm2", "qwen2.5-0.5b"))
    assert qwen["cpu_hours"] > small["cpu_hours"] > 0
    assert qwen["cpu_hours"] == pytest.approx(small["cpu_hours"] * 3.21, abs=0.02)
    assert (small["model_factor"], qwen["model_factor"]) == (1.0, 3.21)
    tiny = dry_run(Design(), 22, 8, model="tiny-llama")["cost"]
    assert 0 < tiny["model_factor"] < 0.1 and "config" in tiny["model_factor_basis"]
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "-m", "qwen2.5-0.5b")
    assert code == 0, err
    assert "estimate for qwen2.5-0.5b (reader smollm2)" in out and "x 3.21" in out


def test_the_cost_factors_are_the_measured_forward_time_ratios():
    """FORWARD_RATIO against the committed speed ladder; the config fallback within 30 % of those measurements."""
    from geosteer.bench.decide_models import FORWARD_RATIO, SMOLLM2_SHAPE, _macs, config_macs
    from geosteer.models.limits import config_of

    ladder = json.loads((ROOT / "docs/results/benchmarks/speed_ladder.json").read_text())["models"]
    base = ladder["smollm2"]["forward"]["stock_s"]
    for name, ratio in FORWARD_RATIO.items():
        assert ratio == round(ladder[name]["forward"]["stock_s"] / base, 2), name
    shape = ladder["smollm2"]["shape"]
    assert _macs(*SMOLLM2_SHAPE) == pytest.approx(shape["params_m"] * 1e6, rel=0.001)  # no tied input embedding
    for name, ratio in FORWARD_RATIO.items():
        cfg = config_of(name)
        if cfg is None:
            continue  # not converted here
        assert config_macs(cfg) / _macs(*SMOLLM2_SHAPE) == pytest.approx(ratio, rel=0.3), name


def test_decides_model_option_is_the_shared_one():
    from geosteer.bench.cli_decide import MODEL_OPT
    from geosteer.cli.common import MODEL_OPT as SHARED

    assert (MODEL_OPT.default, MODEL_OPT.param_decls, MODEL_OPT.help) == (SHARED.default, SHARED.param_decls,
                                                                          SHARED.help)
