"""``geosteer manifold import``: the paper's released surfaces (per layer, per query head × head_dim control nets)
read in each recognised layout and placed surface by surface (checked by explicit indexing, not by the importer's
own reshape), the model's logits with imported surfaces equal to those with the same coefficients set by hand,
the round trip of the shipped SmolLM2 surfaces through the released layout (identical logits), and the refusals:
one line, exit 2, before the model loads, nothing written."""

import io
import json

import pytest
import torch

from geosteer import manifold
from geosteer.interventions import steer
from geosteer.manifold.importer import export_released, read_released, to_bank
from tests.cli_helpers import refused_before_load, run_cli

L, H, D, K = 3, 4, 16, 11  # tiny-llama: 3 layers, 4 query heads, head_dim 16; grid 8


def _coef(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 0.3 * torch.randn(L, H, D, K, K, generator=g)


def _save(path, obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    path.write_bytes(buf.getvalue())
    return path


def _by_hand(model, coef: torch.Tensor, lo=-4.0, hi=4.0):
    """A bank holding ``coef`` set coefficient by coefficient (the reference the importer must equal)."""
    bank = manifold.install(model, grid_size=8, grid_range=(lo, hi))
    manifold.uninstall(model)
    with torch.no_grad():
        for layer in range(L):
            for h in range(H):
                for d in range(D):
                    bank.coefficients[layer, h, d] = coef[layer, h, d]
    return bank


LAYOUTS = {
    "stacked": lambda c: c.clone(),
    "stacked flat heads": lambda c: c.reshape(L, H * D, K, K).clone(),
    "list": lambda c: [c[i].clone() for i in range(L)],
    "state dict": lambda c: {f"model.layers.{i}.self_attn.surfaces.coeffs": c[i].clone() for i in range(L)},
    "int keys, flat": lambda c: {i: c[i].reshape(H * D, K, K).clone() for i in range(L)},
    "nested with settings": lambda c: {"config": {"grid_size": 8, "grid_range": [-4.0, 4.0]},
                                       "surfaces": {str(i): {"coefficients": c[i].reshape(H, D, K * K).clone()}
                                                    for i in range(L)}},
    "layer_N keys, flat nets": lambda c: {"state_dict": {f"layer_{i}": c[i].reshape(H * D, K * K).clone()
                                                         for i in range(L)}},
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layouts_place_every_surface(tmp_path, tiny_model, layout):
    model, _ = tiny_model("llama")
    coef = _coef()
    rel = read_released(_save(tmp_path / "s.pt", LAYOUTS[layout](coef)))
    bank = to_bank(rel, model)
    assert bank.layers == [0, 1, 2] and bank.grid_size == 8
    # surface (layer, h, d) of a flat (heads·head_dim) layout is entry h·D + d: check a few by explicit index
    for layer, h, d in [(0, 0, 0), (1, 2, 5), (2, 3, 15), (2, 1, 7)]:
        assert torch.equal(bank.coefficients[layer, h, d], coef[layer, h, d])
    assert torch.equal(bank.coefficients.detach(), coef)


def test_imported_logits_equal_hand_set(tmp_path, tiny_model):
    model, tok = tiny_model("llama")
    coef = _coef(1)
    ids = torch.tensor([[1, 5, 9, 2, 7, 3, 8, 4]])
    bank = to_bank(read_released(_save(tmp_path / "s.pt", LAYOUTS["int keys, flat"](coef))), model,
                   grid_range=(-2.0, 2.0))
    ref = _by_hand(model, coef, -2.0, 2.0)
    with torch.no_grad():
        stock = model(ids).logits
        with steer(model, bank):
            got = model(ids).logits
        with steer(model, ref):
            want = model(ids).logits
    assert torch.equal(got, want)
    assert float((got - stock).abs().max()) > 1e-3  # the surfaces do something


def test_cli_writes_artifact_with_source(tmp_path, tiny_model, monkeypatch, capsys):
    coef = _coef(2)
    f = _save(tmp_path / "surfaces_grid8.pt", LAYOUTS["nested with settings"](coef))
    out = tmp_path / "imported"
    code, stdout, err = run_cli(monkeypatch, capsys, "manifold", "import", str(f), "-m", "tiny-llama",
                                "--out", str(out), "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["grid_range_from"] == "the file" and summary["parameters"] == coef.numel()
    model, _ = tiny_model("llama")
    bank = manifold.load(out, model=model)
    assert torch.equal(bank.coefficients.detach().cpu(), coef)
    meta = json.loads((out / "geosteer_config.json").read_text())["meta"]
    assert meta["source"]["file"] == str(f) and meta["command"].startswith("geosteer manifold import")
    assert "surfaces_grid8.pt" in (out / "README.md").read_text()


def test_round_trip_shipped_smollm2(tmp_path, smollm2):
    model, tok = smollm2
    shipped = manifold.load("artifacts/smollm2-surfaces", model=model)
    f = export_released(shipped, tmp_path / "released.pt", flat=True, settings=False)
    doc = torch.load(f, weights_only=True)
    assert set(doc) == {f"model.layers.{x}.self_attn.surfaces" for x in range(8, 16)}
    assert tuple(doc["model.layers.8.self_attn.surfaces"].shape) == (9 * 64, 11, 11)
    back = to_bank(read_released(f), model, grid_range=(-4.0, 4.0))
    assert back.layers == shipped.layers
    ids = tok("She saw the man with the telescope", return_tensors="pt").input_ids
    with torch.no_grad():
        with steer(model, shipped):
            a = model(ids).logits
        with steer(model, back):
            b = model(ids).logits
    assert torch.equal(a, b)


def _refused(monkeypatch, capsys, tmp_path, obj, *extra) -> str:
    f = obj if not isinstance(obj, (dict, list, torch.Tensor)) else _save(tmp_path / "s.pt", obj)
    out = tmp_path / "out"
    line = refused_before_load(monkeypatch, capsys, "manifold", "import", str(f), "-m", "tiny-llama",
                               "--out", str(out), *extra)
    assert not out.exists()
    return line


def test_refusals_name_what_was_found(tmp_path, monkeypatch, capsys):
    c = _coef()
    assert "9 × 16 surfaces" in _refused(monkeypatch, capsys, tmp_path,
                                         {i: torch.zeros(9, 16, K, K) for i in range(3)})
    assert "2048 surfaces" in _refused(monkeypatch, capsys, tmp_path, {1: torch.zeros(2048, K, K)})
    assert "16 layers" in _refused(monkeypatch, capsys, tmp_path, torch.zeros(16, H, D, K, K))
    assert "layer 8" in _refused(monkeypatch, capsys, tmp_path, {f"model.layers.{i}.s": c[0] for i in (0, 8)})
    line = _refused(monkeypatch, capsys, tmp_path, {i: torch.zeros(H, D, 19, 19) for i in range(3)}, "--grid", "8")
    assert "19 × 19" in line and "grid 16" in line
    assert "records grid 8" in _refused(monkeypatch, capsys, tmp_path, {"grid_size": 8, "surfaces": list(c)},
                                        "--grid", "16")
    line = _refused(monkeypatch, capsys, tmp_path, {"grid_range": [-3, 3], "surfaces": list(c)}, "--range", "-4", "4")
    assert "[-3, 3]" in line
    assert "no surface tensors" in _refused(monkeypatch, capsys, tmp_path, {"weight": torch.zeros(3, 3)})
    bad = c.clone()
    bad[1, 2, 3, 4, 5] = float("nan")
    assert "layer 1 head 2 dim 3" in _refused(monkeypatch, capsys, tmp_path, bad)


def test_refuses_unreadable_and_unsafe_files(tmp_path, monkeypatch, capsys):
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint")
    assert "weights_only" in _refused(monkeypatch, capsys, tmp_path, text)
    assert "no such file" in _refused(monkeypatch, capsys, tmp_path, tmp_path / "missing.pt")
    evil = tmp_path / "evil.pt"
    _save(evil, {"surfaces": [torch.zeros(H, D, K, K)], "obj": _Opaque()})  # a pickled class: never unpickled
    assert "weights_only" in _refused(monkeypatch, capsys, tmp_path, evil)
    busy = tmp_path / "mine"
    busy.mkdir()
    (busy / "notes.txt").write_text("the user's")
    f = _save(tmp_path / "ok.pt", list(_coef()))
    refused_before_load(monkeypatch, capsys, "manifold", "import", str(f), "-m", "tiny-llama", "--out", str(busy))
    assert (busy / "notes.txt").read_text() == "the user's"


class _Opaque:
    pass
