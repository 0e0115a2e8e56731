"""Concepts in worker processes: the same rows as one process, a killed run resumes, --workers checked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from geosteer.bench.concepts import read_concepts
from geosteer.bench.workers import LoadSpec, resolve_workers, run_parallel
from tests.bench.conftest import CATS, TINY
from tests.cli_helpers import forbid_model_builds, one_line_exit_2, run_cli

LEVERS = ["prompting", "caa", "vector", "lora"]  # lora's adapters start from the random state vector leaves
TIMINGS = ("seconds", "cpu_seconds", "tokens_per_s")  # how long it took, not what it measured
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def two_concepts(tmp_path):
    path = tmp_path / "two.json"
    path.write_text(json.dumps([CATS, dict(CATS, name="no-cats", direction="suppress")]))
    return path


def _untimed(x):
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items() if k not in TIMINGS}
    return [_untimed(v) for v in x] if isinstance(x, list) else x


def _rows(doc: dict) -> str:
    """The rows, curves and concept records without timings, as text (NaN intervals of one prompt compare
    as text)."""
    return json.dumps(_untimed([doc["rows"], doc["curves"], doc["concepts"], doc["failed"]]))


def _one_process(tiny_model, concepts, cfg, out):
    """The reference: every concept in this process, one torch thread (as each worker has)."""
    import geosteer.bench.run as run

    model, tok = tiny_model("llama")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run.run_bench(model, tok, concepts, cfg, out)
    finally:
        torch.set_num_threads(threads)


def test_two_workers_give_the_rows_of_one_process(tmp_path, monkeypatch, capsys, two_concepts):
    runs = {}
    for n in ("1", "2"):
        out = tmp_path / f"w{n}"
        code, _, err = run_cli(monkeypatch, capsys, "bench", "steering", "-m", "tiny-llama", "--concepts",
                               str(two_concepts), "--out", str(out), "--levers", "prompting", "--workers", n,
                               "--threads", "1" if n == "1" else "0", "--no-figures")
        assert code == 0, err
        runs[n] = json.loads((out / "results.json").read_text())
    assert runs["2"]["meta"]["workers"] == 2 and runs["1"]["meta"]["workers"] == 1
    assert [r["concept"] for r in runs["2"]["rows"]] == ["cats", "cats", "no-cats", "no-cats"]
    assert _rows(runs["2"]) == _rows(runs["1"])


_KILLED_RUN = """
import sys
from pathlib import Path
from geosteer.bench.concepts import read_concepts
from geosteer.bench.run import BenchConfig, start_state
from geosteer.bench.workers import LoadSpec, run_parallel
from tests.bench.conftest import TINY
cfg = BenchConfig(model="tiny-llama", levers=sys.argv[3].split(","), budget=TINY)
start_state(Path(sys.argv[2]), cfg)
run_parallel(read_concepts(sys.argv[1]), cfg, Path(sys.argv[2]), LoadSpec("tiny-llama"), 2, log=False)
"""


def _kill_after_first_checkpoint(two_concepts, out: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(two_concepts), str(out), ",".join(LEVERS)],
                            cwd=ROOT, env=env, start_new_session=True, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("cache/*/prompting.json")):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no checkpoint written"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers, as a killed job
        proc.wait()


def test_a_killed_two_worker_run_resumes_with_the_rows_of_one_process(tiny_model, tmp_path, two_concepts,
                                                                     monkeypatch):
    import geosteer.bench.run as run

    concepts = read_concepts(two_concepts)
    cfg = run.BenchConfig(model="tiny-llama", levers=LEVERS, budget=TINY)
    out = tmp_path / "killed"
    _kill_after_first_checkpoint(two_concepts, out)
    kept = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.glob("cache/*/*.json")}
    assert any(p.name != "stock.json" for p in kept) and len(kept) < 2 * (1 + len(LEVERS))  # stopped part-way
    done = run_parallel(concepts, cfg, out, LoadSpec("tiny-llama"), 2, log=False)
    for p, (t, text) in kept.items():  # a finished lever is read back, not redone; the stock record is the same
        assert p.read_bytes() == text and (p.name == "stock.json" or p.stat().st_mtime_ns == t), p
    resumed = run.run_bench(None, None, concepts, cfg, out, done=done)
    assert not resumed["failed"] and len(resumed["rows"]) == 2 * (1 + len(LEVERS))
    assert _rows(resumed) == _rows(_one_process(tiny_model, concepts, cfg, tmp_path / "one"))


def test_bad_workers_are_refused_before_the_model_loads(tmp_path, monkeypatch, capsys, concept_file):
    forbid_model_builds(monkeypatch)
    for bad in ("-1", "two"):
        code, _, err = run_cli(monkeypatch, capsys, "bench", "steering", "-m", "tiny-llama", "--concepts",
                               str(concept_file), "--out", str(tmp_path / "o"), "--workers", bad)
        one_line_exit_2(code, err)
        assert "--workers" in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_the_worker_count():
    assert resolve_workers(0, 12, cpus=2, load=0.1) == 2  # automatic: the free cores
    assert resolve_workers(0, 12, cpus=2, load=1.2) == 1
    assert resolve_workers(0, 12, cpus=8, load=2.0) == 6
    assert resolve_workers(0, 12, threads=1, cpus=2, load=0.0) == 1  # a thread count asked for: one process
    assert resolve_workers(0, 12, device="cuda", cpus=2, load=0.0) == 1
    assert resolve_workers(3, 2) == 2 and resolve_workers(2, 0) == 1  # never more than the concepts to run
    assert resolve_workers(4, 12) == 4
