"""paper/studies/ladder/costs_table.py: one row per study and model from a small costs log (a rerun replaces,
a resumed run adds up, a failed run shows), written between the markers and nowhere else."""

from __future__ import annotations

import pytest

from studies.ladder.costs_table import main, wall_text

HEADER = "date,study,model,dtype,wall_s,peak_rss_mib,exit,command,load_avg\n"
LOG = HEADER + "\n".join([
    't1,deficit,qwen2.5-0.5b,float32,439,4489,0,"a",',             # replaced by the rerun below
    't2,deficit,smollm2,float32,92,1409,0,"b",',
    't3,deficit,qwen2.5-0.5b,float32,191,3244,0,"c",',
    't4,compression,smollm2,float32,3000,2000,143,"d",8.0',        # stopped, then resumed and finished
    't5,compression,smollm2,float32,1000,2600,0,"d",4.0',
    't6,ruler-2k,gemma3-270m,float32,1204,2212,1,"e",6.0',         # failed
    't7,surfaces,qwen2.5-0.5b,float32,5054,8376,143,"f",8.2',      # stopped
]) + "\n"
DOC = "# Title\n\nbefore\n\n<!-- costs -->\n| old |\n<!-- /costs -->\n\nafter\n"


def test_wall_text():
    assert [wall_text(s) for s in (4, 92, 726, 4607, 5054)] == [
        "4 s", "1 min 32 s", "12 min 06 s", "1 h 16 min", "1 h 24 min"]


def test_the_table_from_a_small_log(tmp_path, capsys):
    (tmp_path / "c.csv").write_text(LOG)
    (tmp_path / "d.md").write_text(DOC)
    main(["--csv", str(tmp_path / "c.csv"), "--doc", str(tmp_path / "d.md")])
    text = (tmp_path / "d.md").read_text()
    assert text.startswith("# Title\n\nbefore\n\n<!-- costs -->\n| study |") and text.endswith(
        "<!-- /costs -->\n\nafter\n")
    assert "| old |" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == [
        "| deficit | smollm2 | float32 | 1 min 32 s | 1.4 GiB | not logged | yes |",
        "| deficit | qwen2.5-0.5b | float32 | 3 min 11 s | 3.2 GiB | not logged | yes |",
        # 3000 + 1000 s; the larger RSS; load (8 * 3000 + 4 * 1000) / 4000 = 7.0
        "| compression | smollm2 | float32 | 1 h 6 min | 2.5 GiB | 7.0 | yes |",
        "| ruler-2k | gemma3-270m | float32 | 20 min 04 s | 2.2 GiB | 6.0 | failed (exit 1) |",
        "| surfaces (training) | qwen2.5-0.5b | float32 | 1 h 24 min | 8.2 GiB | 8.2 | stopped, resumable |"]
    assert "5 rows" in capsys.readouterr().out
    main(["--csv", str(tmp_path / "c.csv"), "--doc", str(tmp_path / "d.md"), "--check"])  # up to date


def test_check_reports_a_stale_table(tmp_path):
    (tmp_path / "c.csv").write_text(LOG)
    (tmp_path / "d.md").write_text(DOC)
    with pytest.raises(SystemExit, match="out of date"):
        main(["--csv", str(tmp_path / "c.csv"), "--doc", str(tmp_path / "d.md"), "--check"])
    assert (tmp_path / "d.md").read_text() == DOC


def _row(wall="92", rss="1409", code="0", load="", study="deficit", model="smollm2") -> str:
    return HEADER + f't,{study},{model},float32,{wall},{rss},{code},"a",{load}\n'


@pytest.mark.parametrize("csv_text, doc, message", [
    (LOG, "no markers\n", "needs one '<!-- costs -->'"),
    ("date,study\nx,y\n", DOC, "lacks the column 'model'"),
    ("date,study\n", DOC, "lacks the column 'model'"),
    ("", DOC, "lacks the column 'date'"),
    (_row(wall="soon"), DOC, "line 2: wall_s 'soon' is not valid; wall_s and peak_rss_mib are numbers >= 0"),
    (_row(wall="nan"), DOC, "wall_s 'nan' is not valid"),
    (_row(wall="-5"), DOC, "wall_s '-5' is not valid"),
    (_row(rss="inf"), DOC, "peak_rss_mib 'inf' is not valid"),
    (_row(code="1.5"), DOC, "exit '1.5' is not valid; wall_s and peak_rss_mib are numbers >= 0, exit an integer"),
    (_row(code="256"), DOC, "exit '256' is not valid"),
    (_row(load="busy"), DOC, "load_avg 'busy' is not valid"),
    (_row(study=""), DOC, "line 2: study is empty"),
    (_row(model=" "), DOC, "line 2: model is empty"),
    (HEADER + "t,deficit,smollm2\n", DOC, "line 2: exit None is not valid"),  # a short row
    (HEADER + 't,deficit,smollm2,float32,1,1,0,"a",,extra\n', DOC, "line 2 has more cells than the header"),
    (b"date,study\n\xff\n", DOC, "is not UTF-8 text"),
])
def test_bad_input_is_one_line_before_any_write(tmp_path, capsys, csv_text, doc, message):
    path = tmp_path / "c.csv"
    path.write_bytes(csv_text) if isinstance(csv_text, bytes) else path.write_text(csv_text)
    (tmp_path / "d.md").write_text(doc)
    with pytest.raises(SystemExit) as e:
        main(["--csv", str(tmp_path / "c.csv"), "--doc", str(tmp_path / "d.md")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and message in err[0], err
    assert (tmp_path / "d.md").read_text() == doc


@pytest.mark.parametrize("args, message", [
    (["--csv", "missing.csv"], "--csv missing.csv: no such file"),
    (["--doc", "missing.md"], "--doc missing.md: no such file"),
    (["--csv", "."], "--csv . is a folder; give a regular file"),
    (["--bogus"], "unrecognized arguments: --bogus (valid options: python paper/studies/ladder/costs_table.py --help)"),
    (["--csv"], "argument --csv: expected one argument"),
])
def test_missing_files_and_bad_flags_are_one_line(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "c.csv").write_text(LOG)
    (tmp_path / "d.md").write_text(DOC)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["--csv", "c.csv", "--doc", "d.md", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert (tmp_path / "d.md").read_text() == DOC
