"""The studio lists the exact region walls a bank carries (e.g. learned by ``geosteer manifold wall-learn``)."""

from __future__ import annotations

import torch
from starlette.testclient import TestClient

import geosteer
import geosteer.manifold as M
from geosteer.manifold.walls import Wall
from geosteer.studio.server import create_app
from geosteer.studio.session import Session


def test_info_lists_exact_walls(tmp_path):
    torch.manual_seed(0)
    model, tok = geosteer.load_model("tiny-llama")
    bank = M.install(model, grid_size=4, grid_range=(-3.0, 3.0))
    walls = [Wall(layer=1, heads=(0,), dims=(2, 3), q=(-1.0, 2.5), k=(0.0, float("inf")))]
    bank.set_walls(walls)
    session = Session(model, tok, bank, tmp_path / "ws", model_name="tiny-llama", max_new_tokens_cap=8)
    app = create_app(session, [], allowed_hosts=["testserver"])
    c = TestClient(app, raise_server_exceptions=False, headers={"X-Geosteer-Token": app.state.token})
    d = c.get("/api/info").json()
    assert d["walls"] == [w.describe() for w in walls] and "layer=1" in d["walls"][0]
    page = c.get("/").text
    assert 'id="walls"' in page
    M.uninstall(model)
