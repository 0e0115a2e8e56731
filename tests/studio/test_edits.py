"""Studio edit specs against naive per-element loops; validation messages; workspace name safety."""

from __future__ import annotations

import itertools

import pytest
import torch

from geosteer.studio.edits import apply_edit, parse_edit, undo_edit
from geosteer.studio.session import safe_child

SHAPE = (2, 3, 4, 5, 5)  # bank layers, heads, dims, K, K
LAYERS = [4, 6]


def _naive(c: torch.Tensor, body: dict) -> torch.Tensor:
    """Element-by-element reference of what an edit should do."""
    out = c.clone()
    slot = LAYERS.index(body["layer"])
    rows = body.get("rows", body.get("row"))
    cols = body.get("cols", body.get("col"))
    rows = range(SHAPE[3]) if rows is None else range(rows[0], rows[1] + 1) if isinstance(rows, list) \
        else [rows]
    cols = range(SHAPE[4]) if cols is None else range(cols[0], cols[1] + 1) if isinstance(cols, list) \
        else [cols]
    heads = [body["head"]] if body.get("scope", "surface") in ("surface", "head") else range(SHAPE[1])
    dims = [body["dim"]] if body.get("scope", "surface") == "surface" else range(SHAPE[2])
    for h, d, r, k in itertools.product(heads, dims, rows, cols):
        v = float(c[slot, h, d, r, k])
        op = body["op"]
        out[slot, h, d, r, k] = {"scale": v * body.get("factor", 1.0), "invert": -v, "zero": 0.0,
                                 "set": body.get("value", 0.0), "grid-wall": -1.0}[op]
    return out


CASES = [
    {"op": "invert", "scope": "surface", "layer": 6, "head": 1, "dim": 2},
    {"op": "scale", "scope": "head", "layer": 4, "head": 2, "factor": -0.5},
    {"op": "zero", "scope": "layer", "layer": 6},
    {"op": "set", "scope": "surface", "layer": 4, "head": 0, "dim": 3, "row": 2, "col": 4, "value": 0.7},
    {"op": "invert", "scope": "surface", "layer": 6, "head": 2, "dim": 0, "rows": [2, 4]},
    {"op": "zero", "scope": "head", "layer": 6, "head": 0, "cols": [0, 1]},
    {"op": "grid-wall", "scope": "layer", "layer": 4, "rows": [1, 3], "cols": [2, 2]},
]


def _bank():
    from geosteer.manifold import ManifoldConfig, SurfaceBank

    cfg = ManifoldConfig(grid_size=2, layers=LAYERS, n_layers=8, n_heads=SHAPE[1], head_dim=SHAPE[2])
    bank = SurfaceBank(cfg)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)))
    return bank


@pytest.mark.parametrize("body", CASES, ids=[f"{c['op']}-{c['scope']}" for c in CASES])
def test_edit_matches_naive_loop_and_undo_restores(body):
    bank = _bank()
    orig = bank.coefficients.detach().clone()
    spec = parse_edit(dict(body), SHAPE, LAYERS)
    rec = apply_edit(bank, spec, version_before=1)
    torch.testing.assert_close(bank.coefficients.detach(), _naive(orig, body), rtol=0, atol=0)
    assert bank.history[-1]["op"] == body["op"] and bank.history[-1]["source"] == "studio"  # library names
    undo_edit(bank, rec)
    assert torch.equal(bank.coefficients.detach(), orig) and bank.history == []


def test_exact_wall_is_the_librarys_wall_and_undo_removes_it():
    import math

    from geosteer.manifold.walls import Wall

    bank = _bank()
    orig = bank.coefficients.detach().clone()
    spec = parse_edit({"op": "wall", "scope": "head", "layer": 6, "head": 1, "q": [0.5, None]}, SHAPE, LAYERS)
    rec = apply_edit(bank, spec, version_before=1)
    assert torch.equal(bank.coefficients.detach(), orig)  # a region list, not coefficients
    assert bank.walls == [Wall(layer=6, heads=(1,), dims=None, q=(0.5, math.inf), k=(-math.inf, math.inf))]
    assert bank.history[-1]["op"] == "wall" and "q 0.5..inf" in spec.describe()
    undo_edit(bank, rec)
    assert bank.walls == [] and bank.history == []


@pytest.mark.parametrize("body,msg", [
    ({"op": "wall", "scope": "layer", "layer": 4, "rows": [0, 1]}, "wall .exact. takes q/k value ranges"),
    ({"op": "grid-wall", "scope": "layer", "layer": 4, "q": [0, 1]}, "grid-wall takes no q/k ranges"),
    ({"op": "wall", "scope": "layer", "layer": 4, "q": [1, 0]}, "lo must be below hi"),
    ({"op": "wall", "scope": "layer", "layer": 4, "k": [0, "x"]}, r"k must be \[lo, hi\]"),
    ({"op": "flip", "layer": 4, "head": 0, "dim": 0}, "op must be one of"),
    ({"op": "invert", "scope": "model", "layer": 4}, "scope must be one of"),
    ({"op": "invert", "layer": 5, "head": 0, "dim": 0}, "layer must be one of"),
    ({"op": "invert", "layer": 4, "head": 3, "dim": 0}, r"head 3 out of range \(valid 0–2\)"),
    ({"op": "invert", "layer": 4, "head": 0, "dim": "1"}, "dim must be an integer"),
    ({"op": "scale", "layer": 4, "head": 0, "dim": 0}, "numeric factor"),
    ({"op": "scale", "layer": 4, "head": 0, "dim": 0, "factor": 1e9}, "numeric factor"),
    ({"op": "set", "layer": 4, "head": 0, "dim": 0, "value": None}, "numeric value"),
    ({"op": "zero", "layer": 4, "head": 0, "dim": 0, "rows": [3, 1]}, r"rows \[3, 1\] out of range"),
    ({"op": "zero", "layer": 4, "head": 0, "dim": 0, "cols": [0, 5]}, "indices are 0–4"),
    ({"op": "zero", "layer": 4, "head": 0, "dim": 0, "path": "/etc"}, "unknown edit field"),
])
def test_bad_edits_name_the_problem(body, msg):
    with pytest.raises(ValueError, match=msg):
        parse_edit(body, SHAPE, LAYERS)


@pytest.mark.parametrize("name", ["../x", "..", ".", "a/b", "/etc", ".hidden", "a\\b", "", "x" * 65,
                                  "a..b", "nul\x00", "é"])
def test_safe_child_refuses_paths(tmp_path, name):
    with pytest.raises(ValueError, match="invalid artifact name"):
        safe_child(tmp_path, name, "artifact name")


def test_safe_child_accepts_plain_names(tmp_path):
    assert safe_child(tmp_path, "run-1.v2_ok") == (tmp_path / "run-1.v2_ok").resolve()


@pytest.mark.parametrize("body,msg", [
    ({"op": "invert", "layer": True, "head": 0, "dim": 0}, r"layer must be an integer \(got True\)"),
    ({"op": "invert", "layer": 4, "head": 1.0, "dim": 0}, r"head must be an integer \(got 1.0\)"),
    ({"op": "scale", "layer": 4, "head": 0, "dim": 0, "factor": "2"}, r"factor must be a number \(got '2'\)"),
    ({"op": "scale", "layer": 4, "head": 0, "dim": 0, "factor": True}, "factor must be a number"),
    ({"op": "invert", "scope": 3, "layer": 4}, "scope must be one of 'surface', 'head', 'layer'"),
    ({"layer": 4}, "op is required"),
    ([1], "edit must be a JSON object"),
])
def test_edit_body_is_strict(body, msg):
    """The pydantic model (strict mode): no coercion of booleans, floats or strings into indices or numbers."""
    with pytest.raises(ValueError, match=msg):
        parse_edit(body, SHAPE, LAYERS)


@pytest.mark.parametrize("model,body,msg", [
    ("SaveBody", {"name": "a", "overwrite": "yes"}, r"overwrite must be true or false \(got 'yes'\)"),
    ("SaveBody", {"name": "a", "path": "/etc"}, r"unknown field\(s\) \['path'\]; valid: \['name', 'overwrite'\]"),
    ("UndoBody", {"x": 1}, r"unknown field\(s\) \['x'\]; valid: \[\]"),
    ("EffectBody", {"max_new_tokens": 2.0}, r"max_new_tokens must be an integer \(got 2.0\)"),
    ("EffectBody", {"reference": "x"}, "reference must be one of 'loaded', 'previous', 'none'"),
    ("EffectBody", {"prompt": 5}, r"prompt must be a string \(got 5\)"),
])
def test_request_bodies_one_line_errors(model, body, msg):
    from geosteer.studio import bodies

    with pytest.raises(ValueError, match=msg) as e:
        bodies.parse(getattr(bodies, model), body, "JSON body must be an object")
    assert "\n" not in str(e.value)
    ok = bodies.parse(bodies.EffectBody, {"prompt": "x", "max_new_tokens": 3}, "-")
    assert (ok.prompt, ok.max_new_tokens, ok.reference) == ("x", 3, "loaded")
