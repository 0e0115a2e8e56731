"""``bench decide``'s --out and run folder: paths that cannot hold a run, a folder another run holds, a
design told apart by what differs, a concept file known by its bytes, run files that are folders or lack what
the report reads; and ``bench text``'s numbers checked before its model loads. Each one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bench.test_decide_inputs import _decide, _seal_state
from tests.cli_helpers import refused_before_load


@pytest.fixture
def no_run(monkeypatch):
    """The steered model and reader count as installed, and a run that gets past the checks fails the test."""
    from geosteer.bench import cli_decide, decide_driver

    monkeypatch.setattr(cli_decide, "_check_models", lambda model, reader, installed=True: "gemma3-270m")

    def ran(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr(decide_driver, "run_all", ran)


@pytest.mark.parametrize("kind,needle", [
    ("dangling", "is a link to"),
    ("under-dangling", "a link to"),
    ("too-long", "cannot write there (File name too long)"),
])
def test_an_out_that_cannot_hold_a_run_is_one_line(monkeypatch, capsys, tmp_path, no_run, kind, needle):
    out = {"dangling": "run", "under-dangling": "link/run", "too-long": "a" * 300}[kind]
    if kind != "too-long":
        (tmp_path / out.split("/")[0]).symlink_to(tmp_path / "nowhere")
    err = _decide(monkeypatch, capsys, tmp_path, "--out", out, "--only", "arts,health")
    assert needle in err and not (tmp_path / "nowhere").exists()


def test_an_out_inside_the_installed_package_is_refused(tmp_path):
    import geosteer
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import check_resumable_folder

    inside = Path(geosteer.__file__).parent / "bench" / "a-run"
    with pytest.raises(GeosteerError, match="inside the installed geosteer package"):
        check_resumable_folder(inside, "decide_state.json")
    assert not inside.exists()
    assert check_resumable_folder(tmp_path / "run", "decide_state.json") == tmp_path / "run"


def test_a_folder_another_run_holds_is_refused(monkeypatch, capsys, tmp_path, no_run):
    ready = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from geosteer.bench.decide_folder import claim; claim(sys.argv[1]); "
                               "Path(sys.argv[2]).touch(); time.sleep(60)", str(tmp_path / "run"), str(ready)])
    try:
        deadline = time.monotonic() + 50
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", "--only", "arts,health")
    finally:
        holder.kill()
        holder.wait()
    assert "another run of bench decide is writing this folder now" in err
    assert not (tmp_path / "run" / "decide_state.json").exists()


def test_a_state_that_cannot_be_written_is_one_line(monkeypatch, tmp_path):
    from geosteer.bench import decide_folder
    from geosteer.errors import GeosteerError

    def denied(path, doc):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(decide_folder, "write_sealed", denied)
    with pytest.raises(GeosteerError, match=r"--out .*: cannot write its decide_state.json \(Permission denied\)"):
        decide_folder.record_state(tmp_path / "run", "decide_state.json", {"seeds": [0], "explore": []}, None)


def _state(concepts: dict, **design) -> dict:
    from geosteer.bench.decide_folder import state_doc
    from geosteer.bench.decide_run import LEVERS
    from geosteer.bench.design import Design

    return state_doc("smollm2", "gemma3-270m", concepts, Design(**design).to_dict(), list(LEVERS), [], [0])


def test_a_concept_file_is_the_same_by_its_bytes_whatever_path_names_it(tmp_path):
    from geosteer.bench.decide_folder import check_state, record_state
    from geosteer.errors import GeosteerError

    bundled = {"source": "bundled", "sha256": "b" * 64}
    record_state(tmp_path, "decide_state.json", _state({**bundled, "file": {"source": "c.json", "sha256": "1" * 64}}),
                 None)
    same = _state({**bundled, "file": {"source": "/elsewhere/copy.json", "sha256": "1" * 64}})
    assert check_state(tmp_path, "decide_state.json", same)["concepts"]["file"]["source"] == "c.json"
    for other in ({**bundled, "file": {"source": "c.json", "sha256": "2" * 64}},
                  {"source": "c.json", "sha256": "1" * 64}, bundled):
        with pytest.raises(GeosteerError, match="holds a run of another design: concepts"):
            check_state(tmp_path, "decide_state.json", _state(other))


def test_another_design_is_refused_naming_what_differs(tmp_path):
    from geosteer.bench.decide_folder import check_state, record_state
    from geosteer.errors import GeosteerError

    concepts = {"source": "bundled", "sha256": "b" * 64}
    record_state(tmp_path, "decide_state.json", _state(concepts), None)
    with pytest.raises(GeosteerError) as e:
        check_state(tmp_path, "decide_state.json", _state(concepts, kl_levels=(0.05, 0.2)))
    msg = str(e.value)
    assert "kl_levels=[0.02, 0.05, 0.1, 0.2, 0.5] there" in msg and "kl_levels=[0.05, 0.2] here" in msg
    assert "bootstrap" not in msg and "steps" not in msg


def _context(out: Path, **changes) -> Path:
    from geosteer.bench.decide_folder import write_sealed
    from geosteer.bench.decide_run import VERSION

    doc = {"fingerprint": {"version": VERSION}, "concept": "arts", "kind": "topic-promote", "direction": "promote",
           "seed": 0, "admission": {"auc": 0.9, "admitted": True}, "keyword_probe": {}, "prompts": ["p"],
           "stock": {"texts": ["t"]}, **changes}
    path = out / "units" / "arts" / "s0" / "context.json"
    write_sealed(path, doc)
    return path


def _run_state(out: Path) -> None:
    """The state a run of the bundled concepts with the full design records (what a resume is checked against)."""
    from geosteer.bench.cli_decide import MODEL
    from geosteer.bench.decide_concepts import identity, pool_record
    from geosteer.bench.decide_draw import record
    from geosteer.bench.decide_folder import record_state, state_doc
    from geosteer.bench.decide_run import LEVERS
    from geosteer.bench.design import STATE_FILE, Design

    want = state_doc(MODEL, "gemma3-270m", identity(), Design().to_dict(), list(LEVERS), [], [0],
                     record(pool_record(), False))
    record_state(out, STATE_FILE, want, None)


@pytest.mark.parametrize("name", ["context.json", "vector.json"])
def test_a_folder_in_place_of_a_run_file_is_refused_naming_it(monkeypatch, capsys, tmp_path, no_run, name):
    _run_state(tmp_path / "run")
    path = _context(tmp_path / "run")
    if name == "context.json":
        path.unlink()
    (path.parent / name).mkdir()
    for args in (["--only", "arts,health"], ["--report-only"]):
        err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", *args)
        assert f"run file {Path('run/units/arts/s0') / name} is a folder" in err


def test_a_sealed_unit_lacking_what_the_report_reads_is_one_line(monkeypatch, capsys, tmp_path):
    _seal_state(tmp_path / "run")
    _context(tmp_path / "run")  # sealed, with every top-level key, but its keyword probe has no words
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", "--report-only")
    assert "run files run/units/arts/s0: a file lacks what this version of bench decide records" in err
    assert not (tmp_path / "run" / "records.csv").exists()


def test_only_names_the_option_when_it_names_a_dev_concept(monkeypatch, capsys, tmp_path):
    err = _decide(monkeypatch, capsys, tmp_path, "--dry-run", "--only", "arts,people")
    assert err.startswith("error: --only: unknown concept 'people'") and "dev concept" in err


@pytest.mark.parametrize("args,needle", [
    (["--seed", "-1"], "--seed must be >= 0 (got -1)"),
    (["--new-tokens", "100000"], "--new-tokens 100000 is longer than the model's 512 positions"),
])
def test_bench_text_numbers_are_checked_before_the_model_loads(monkeypatch, capsys, tmp_path, args, needle):
    monkeypatch.chdir(tmp_path)
    assert needle in refused_before_load(monkeypatch, capsys, "bench", "text", "-m", "tiny-llama", *args)


def test_the_claim_ends_with_its_process(tmp_path):
    """A killed run's folder is free again: the lock goes with the process."""
    from geosteer.bench.decide_folder import claim

    holder = subprocess.run([sys.executable, "-c", "import sys; from geosteer.bench.decide_folder import claim; "
                             "claim(sys.argv[1]); import os; os._exit(0)", str(tmp_path / "run")], check=True)
    assert holder.returncode == 0
    claim(tmp_path / "run")
    assert os.listdir(tmp_path / "run") == []  # the lock is the folder's own: no file of its own left


@pytest.mark.parametrize("verb", ["decide", "judge"])
def test_a_csv_concept_file_and_a_bad_axbench_file_are_refused_naming_the_option(monkeypatch, capsys, tmp_path,
                                                                                  verb):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text('["a text"]')
    (tmp_path / "ax.csv").write_text("input,output,output_concept,category\nq,a,cats,positive\n")
    (tmp_path / "ax.jsonl").write_text('{"input": "q", "output_concept": "cats", "category": "positive"}\n')
    extra = ["--dry-run"] if verb == "decide" else ["--texts", "t.json"]
    for name, needle in (("ax.csv", "a '.csv' file is not read; give geosteer's concept JSON (.json) or an "
                                    "AxBench file (.jsonl, .json, .parquet)"),
                         ("ax.jsonl", "line 1 has no 'output'")):
        err = refused_before_load(monkeypatch, capsys, "bench", verb, "--concepts", name, *extra)
        assert err.startswith(f"error: --concepts {name}: ") and needle in err


@pytest.mark.parametrize("config,needle", [('{"model_type": ', "is not valid JSON"),
                                           ("[" * 1000 + "]" * 1000, "nested deeper"),
                                           ("[1]", "is not a JSON object")])
def test_a_model_folder_whose_config_cannot_be_read_is_refused(monkeypatch, capsys, tmp_path, config, needle):
    from geosteer.bench import decide_driver

    def ran(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr(decide_driver, "run_all", ran)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(config)
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", "--model", "m", "--reader", "smollm2", "--only",
                  "arts,health")
    assert "needs the steered model 'm': m is not a model folder" in err and needle in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("report_only", [False, True])
def test_a_changed_state_file_is_not_to_be_deleted(monkeypatch, capsys, tmp_path, no_run, report_only):
    """Deleting the state would leave measured files that no run may resume: the line says to restore it."""
    _run_state(tmp_path / "run")
    _context(tmp_path / "run")
    state = tmp_path / "run" / "decide_state.json"
    state.write_text(state.read_text().replace('"smollm2"', '"smollm3"'))
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", *(["--report-only"] if report_only else
                                                                    ["--only", "arts,health"]))
    assert "run file run/decide_state.json was changed after it was written" in err
    assert "restore it, or give a new --out" in err and "delete it" not in err


def test_the_frontier_page_is_written_atomically_and_a_killed_ones_tmp_goes(monkeypatch, tmp_path):
    pytest.importorskip("plotly")
    import plotly.graph_objects as go

    from geosteer.bench.decide_folder import remove_stale_tmp
    from geosteer.bench.decide_frontier import write_figure

    def in_place(*a, **k):
        raise AssertionError("written in place: a killed report would leave half a page")

    monkeypatch.setattr(go.Figure, "write_html", in_place)
    (tmp_path / "results.json").write_text(json.dumps({"frontier": [], "kl_levels": ["0.05", "0.2"]}))
    page = write_figure(tmp_path / "results.json")
    assert page.read_text().rstrip().endswith("</html>")
    stale = tmp_path / ".frontier.html.ab12cd34.tmp"
    stale.write_text("<html")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    assert remove_stale_tmp(tmp_path) == [stale]


@pytest.mark.parametrize("name", ["results.json", "verdict.txt"])
def test_a_folder_where_the_report_writes_is_refused_before_any_is_written(monkeypatch, capsys, tmp_path, name):
    _seal_state(tmp_path / "run")
    (tmp_path / "run" / name).mkdir()
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", "--report-only")
    assert f"run/{name} is a folder where the report writes its {name}" in err
    assert sorted(os.listdir(tmp_path / "run")) == sorted(["decide_state.json", name])
