"""paper/studies/manifold/terrain_figure.py: the embedded heatmaps decode to the sampled surface's colours
(parsed here with zlib, not the writer), and the figure's numbers on the shipped files follow from the
artifact's tensors and the recorded q/k rows directly."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from studies.manifold import terrain_figure as tf
from tests.tolerance import assert_records_close

ROOT = Path(__file__).resolve().parents[3]
ART = ROOT / "artifacts" / "smollm2-surfaces-all"
QK = ROOT / "docs" / "results" / "manifold" / "fig2_qk.json"


def _decode(uri: str) -> np.ndarray:
    png = base64.b64decode(uri.split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", png[16:24])
    i, idat = 8, b""
    while i < len(png):
        n = struct.unpack(">I", png[i:i + 4])[0]
        if png[i + 4:i + 8] == b"IDAT":
            idat += png[i + 8:i + 8 + n]
        i += 12 + n
    raw = zlib.decompress(idat)
    rows = [raw[r * (3 * w + 1):(r + 1) * (3 * w + 1)] for r in range(h)]
    assert all(r[0] == 0 for r in rows)  # filter type none
    return np.array([[list(r[1 + 3 * j:4 + 3 * j]) for j in range(w)] for r in rows])


def test_colour_scale_ends_and_middle():
    assert tf.colour(0.0, 1.0) == "#ffffff"
    assert tf.colour(1.0, 1.0) == "#b2182b" and tf.colour(5.0, 1.0) == "#b2182b"  # clipped
    assert tf.colour(-1.0, 1.0) == "#2166ac"


def test_png_rows_are_the_surface_with_the_highest_query_on_top():
    z = np.array([[-1.0, 0.0, 0.5], [1.0, 0.25, -0.5]])  # row 0: lowest q
    px = _decode(tf.png_uri(z, 1.0))
    assert px.shape == (2, 3, 3)
    for i in range(2):
        for j in range(3):
            hexed = "#" + "".join(f"{c:02x}" for c in px[1 - i, j])
            assert hexed == tf.colour(z[i, j], 1.0)


@pytest.mark.skipif(not (ART.is_dir() and QK.is_file()), reason="needs the shipped artifact and q/k file")
@pytest.mark.committed
@pytest.mark.parametrize("threads", [1, 4], ids=["one-thread", "four-threads"])
def test_numbers_on_the_shipped_files(tmp_path, threads):
    # the committed file comes from another machine: equal within float32 rounding, whatever the thread count
    # (four threads split the BLAS reductions differently from one, also on a 2-core machine)
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _check_shipped(tmp_path)
    finally:
        torch.set_num_threads(before)


def _check_shipped(tmp_path):
    tf.main(["--surfaces", str(ART), "--qk", str(QK), "--svg", str(tmp_path / "f.svg"), "--out",
             str(tmp_path / "f.json")])
    doc = json.loads((tmp_path / "f.json").read_text())
    tensors = load_file(str(ART / "surfaces.safetensors"))
    cfg = json.loads((ART / "geosteer_config.json").read_text())
    layers = list(cfg["layers"])
    coef, lo, hi = tensors["coefficients"], tensors["lo"], tensors["hi"]
    rows = json.loads(QK.read_text())["rows"]
    norms = {(r["layer"], r["head"], r["dim"]):
             float(np.linalg.norm(coef[layers.index(r["layer"]), r["head"], r["dim"]])) for r in rows}
    top = sorted(norms, key=lambda s: -norms[s])[:4]
    assert [(r["layer"], r["head"], r["dim"]) for r in doc["rows"] if r["figure"] == "fig2"] == top
    for r in doc["rows"]:
        assert r["norm"] == pytest.approx(norms[(r["layer"], r["head"], r["dim"])], rel=1e-5)
    inside = np.mean([lo[layers.index(r["layer"])] <= r["q"] <= hi[layers.index(r["layer"])]
                      and lo[layers.index(r["layer"])] <= r["k"] <= hi[layers.index(r["layer"])] for r in rows])
    assert doc["summary"]["self_pairs_inside_share"] == pytest.approx(inside, abs=1e-12)
    assert doc["summary"]["self_pairs"] == len(rows)
    svg = (tmp_path / "f.svg").read_text()
    assert svg.count("<image ") == len(doc["rows"]) and svg.count("<circle ") == 6 * len(doc["rows"])
    shipped = json.loads((ROOT / "docs" / "results" / "manifold" / "fig2_terrain.json").read_text())
    assert_records_close(doc["rows"], shipped["rows"], where="rows")
    assert_records_close(doc["summary"], shipped["summary"], where="summary")


def test_a_file_that_is_not_a_qk_recording_is_refused(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"meta": {}, "rows": [{"a": 1}]}))
    with pytest.raises(ValueError, match="not a recorded q/k file"):
        tf.main(["--qk", str(bad), "--svg", str(tmp_path / "f.svg"), "--out", str(tmp_path / "f.json")])
    assert not (tmp_path / "f.svg").exists()
