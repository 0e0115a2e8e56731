"""The bounded readers: a FIFO or device is refused at once (no reader waits), sizes, nesting, CSV cells and
lone surrogates are one-line refusals, and item patterns cannot backtrack for ever."""

from __future__ import annotations

import os
import threading

import pytest

from geosteer.readers import (
    MAX_REGEX_LINE,
    ReadRefused,
    match_pattern,
    read_bytes,
    read_csv_rows,
    read_json,
    read_text,
    safe_regex,
    search_lines,
)


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_fifo_and_devices_are_refused_without_waiting(tmp_path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    done = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(ReadRefused, read_json, fifo)), daemon=True)
    t.start()
    t.join(10)
    assert done, "reading a FIFO with no writer blocked"
    assert "FIFO" in str(done[0].value)
    with pytest.raises(ReadRefused, match="is a device") as e:
        read_bytes("/dev/zero")
    _one_line(e)
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(ReadRefused, match="is a device"):
        read_json(link)
    with pytest.raises(ReadRefused, match="is a folder"):
        read_text(tmp_path)
    with pytest.raises(ReadRefused, match="no such file"):
        read_text(tmp_path / "missing.json")


def test_size_cap(tmp_path):
    p = tmp_path / "big.txt"
    p.write_bytes(b"x" * 2000)
    assert len(read_bytes(p, limit=2000)) == 2000
    with pytest.raises(ReadRefused, match="over the"):
        read_bytes(p, limit=1999)


@pytest.mark.parametrize("depth", [65, 5000, 100_000])
def test_deep_json_is_refused(tmp_path, depth):
    p = tmp_path / "deep.json"
    p.write_text("[" * depth + "]" * depth)
    with pytest.raises(ReadRefused, match="nested deeper than 64 levels") as e:
        read_json(p)
    _one_line(e)
    p.write_text("[" * 64 + "]" * 64)
    assert read_json(p) is not None


@pytest.mark.parametrize("text, needle", [
    ('{"a": "caf\\ud800"}', "lone UTF-16 surrogate"),
    ('{"caf\\udfff": 1}', "lone UTF-16 surrogate"),
    ('{"a": ' + "1" * 5000 + "}", "not valid JSON"),
    ('{"a": 1', "not valid JSON"),
])
def test_bad_json_is_one_line(tmp_path, text, needle):
    p = tmp_path / "x.json"
    p.write_text(text)
    with pytest.raises(ReadRefused, match=needle) as e:
        read_json(p)
    _one_line(e)


def test_bad_utf8_is_one_line(tmp_path):
    p = tmp_path / "x.json"
    p.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ReadRefused, match="not UTF-8"):
        read_json(p)


def test_csv_cells_and_rows(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("a,b\n1,2\n3,\n")
    assert read_csv_rows(p) == [{"a": "1", "b": "2"}, {"a": "3", "b": ""}]
    p.write_text("a,b\n" + "x" * 200_000 + ",1\n")  # over csv's own 128 KiB default
    assert len(read_csv_rows(p)[0]["a"]) == 200_000
    with pytest.raises(ReadRefused, match="at most 1000 bytes") as e:
        read_csv_rows(p, max_field=1000)
    _one_line(e)
    p.write_text("a,b\n1,2,3\n")
    with pytest.raises(ReadRefused, match="more cells than the header"):
        read_csv_rows(p)


@pytest.mark.parametrize("pattern", [r"(a+)+b", r"(a|aa)*b", r"(?:ab)+c", r"(x*)*", r"(a)\1", r"(?=a)(a)",
                                     r"(?!a)(b)", "(" + "a" * 300 + ")"])
def test_patterns_that_can_backtrack_are_refused(pattern):
    with pytest.raises(ValueError) as e:
        safe_regex(pattern)
    assert "\n" not in str(e.value)


def test_accepted_patterns_finish_quickly_on_hostile_text():
    hostile = ("a" * (MAX_REGEX_LINE - 1) + "\n") * 200
    for pattern in (r"a*a*a*a*a*a*(b)", r".*.*.*(x)", r"\s*([0-9.]+)\s*ms"):  # possessive: no giving back
        assert search_lines(safe_regex(pattern), hostile) == []
    assert search_lines(safe_regex(r"ratio: ([0-9.]+)"), "x\nratio: 1.46\nratio: 2\n") == ["1.46", "2"]
    with pytest.raises(ReadRefused, match="longer than"):
        search_lines(safe_regex(r"(a)"), "a" * (MAX_REGEX_LINE + 1))


def test_wildcards():
    assert match_pattern("1.*", "1.29") and not match_pattern("1.*", "2.1")
    assert not match_pattern("*a*a*a*a*a*a*a*a*b", "a" * 5000)
    with pytest.raises(ReadRefused):
        match_pattern("*" * 300, "x")
    assert match_pattern("x?", "xy") and not match_pattern("x?", "x")
