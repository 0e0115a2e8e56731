"""Progress bars: shown on a terminal only, silent when piped, with --json or GEOSTEER_PROGRESS=0; the
per-step counter's ETA is the mean step time so far times the steps left."""

from __future__ import annotations

import io

import pytest

from geosteer import progress as P


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def stderr(monkeypatch):
    monkeypatch.delenv("GEOSTEER_PROGRESS", raising=False)
    monkeypatch.setattr(P, "_quiet", False)
    box = {}

    def use(stream):
        monkeypatch.setattr("sys.stderr", stream)
        box["s"] = stream
        return stream

    return use


def _run(n=5):
    with P.progress(n, "work", unit="item") as step:
        for _ in range(n):
            step()


def test_bar_with_total_on_a_terminal(stderr):
    s = stderr(_Tty())
    _run()
    assert "work" in s.getvalue() and "/5 " in s.getvalue()  # the total is shown (the bar clears at the end)


def test_silent_when_piped_quiet_or_disabled(stderr, monkeypatch):
    s = stderr(io.StringIO())
    _run()
    assert s.getvalue() == ""
    t = stderr(_Tty())
    P.quiet()
    _run()
    P.quiet(False)
    monkeypatch.setenv("GEOSTEER_PROGRESS", "0")
    _run()
    assert t.getvalue() == ""
    monkeypatch.setenv("GEOSTEER_PROGRESS", "1")  # forced on for a log file
    s = stderr(io.StringIO())
    _run()
    assert "/5 " in s.getvalue()


def test_json_option_silences_bars(monkeypatch):
    from geosteer.cli.common import _json_quiets_progress

    monkeypatch.setattr(P, "_quiet", False)
    _json_quiets_progress(False)
    assert not P._quiet
    _json_quiets_progress(True)
    assert P._quiet


def test_counter_eta():
    assert P.counter(0, 10, 0.0) == "0/10"
    assert P.counter(2, 10, 4.0) == "2/10, about 16 s left"  # 2 s a step, 8 left
    assert P.counter(7, 10, 4.0, start=5) == "7/10, about 6 s left"  # resumed at 5: 2 s a step, 3 left
    assert P.counter(1, 100, 60.0) == "1/100, about 99.0 min left"
    assert P.counter(10, 10, 9.0) == "10/10"


def test_piped_console_is_100_columns_and_folds_rather_than_cuts(monkeypatch):
    from rich.table import Table

    from geosteer.terminal import PIPED_WIDTH, console

    buf = io.StringIO()
    monkeypatch.setattr("sys.stdout", buf)
    c = console()
    c.file = buf
    t = Table()
    cols = [f"column_number_{i}" for i in range(8)]
    for col in cols:
        t.add_column(col, overflow="fold")
    cells = [f"value_{i}_long_enough" for i in range(8)]
    t.add_row(*cells)
    c.print(t)
    lines = buf.getvalue().splitlines()
    assert PIPED_WIDTH == 100 and max(len(x) for x in lines) <= 100
    assert "…" not in buf.getvalue()
    # each cell's characters are all there, in order, once the folded pieces of its column are joined
    bodies = [x.replace("┃", "│") for x in lines if x[:1] in "│┃"]
    columns = ["".join(row.split("│")[1:-1][j].strip() for row in bodies) for j in range(8)]
    assert all(col + cell in joined for col, cell, joined in zip(cols, cells, columns, strict=True)), columns
