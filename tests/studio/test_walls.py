"""The studio lists the exact region walls a bank carries (e.g. learned by ``geosteer learn walls``)."""

from __future__ import annotations

import copy

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


def test_an_exact_wall_edit_reaches_the_model_and_undo_takes_it_back(tmp_path):
    """A `wall` edit changes what the model computes: the effect's next-token top-10 equals a bank walled
    directly through `set_walls` (plain forward), and the previous / loaded references are the unwalled model."""
    torch.manual_seed(0)
    model, tok = geosteer.load_model("tiny-llama")
    bank = M.install(model, grid_size=4, grid_range=(-3.0, 3.0))
    with torch.no_grad():
        bank.coefficients.normal_(0, 0.3, generator=torch.Generator().manual_seed(1))
    reference = copy.deepcopy(bank)
    session = Session(model, tok, bank, tmp_path / "ws", model_name="tiny-llama", max_new_tokens_cap=8)
    prompt = "The cat sat on the"
    opts = {"prompt": prompt, "max_new_tokens": 2, "reference": "loaded"}
    before = session.submit_effect(opts).result()
    for head in (0, 1):  # no q/k ranges: every pair of the head's channels
        session.edit({"op": "wall", "scope": "head", "layer": 1, "head": head})
    assert len(session.bank.walls) == 2
    after = session.submit_effect(opts).result()
    M.uninstall(model)

    reference.set_walls(session.bank.walls)
    M.install(model, bank=reference)
    try:
        ids = geosteer.eval.generation.prompt_ids(tok, prompt)
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, -1].float(), -1)
    finally:
        M.uninstall(model)
    assert [t["id"] for t in after["after"]["top"]] == torch.topk(logp, 10).indices.tolist()
    assert after["kl"] > 1e-6 and after["before"]["top"] == before["after"]["top"]
    session.undo()
    session.undo()
    again = session.submit_effect({**opts, "reference": "none"}).result()
    assert again["after"]["top"] == before["after"]["top"]
