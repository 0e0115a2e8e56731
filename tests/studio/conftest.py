"""What the studio tests share: a studio session on the tiny Llama with surfaces installed, served by the app
through a test client that carries the app's token."""

from __future__ import annotations

import pytest
import torch
from starlette.testclient import TestClient

import geosteer
import geosteer.manifold as M
from geosteer.studio.server import create_app
from geosteer.studio.session import Session
from tests.conftest import random_bank

GRID = dict(grid_size=4, grid_range=(-3.0, 3.0))


def installed_bank(model, seed: int | None = None, scale: float = 0.5):
    """Surfaces (grid 4 over ±3) installed on ``model``: zero coefficients, or ``scale`` × N(0, 1) from ``seed``."""
    return M.install(model, bank=random_bank(model, seed=seed, scale=scale, **GRID)) if seed is not None \
        else M.install(model, **GRID)


def studio_client(session, results=(), hosts=("testserver",)):
    """``(app, client)`` serving ``session``; the client sends the app's ``X-Geosteer-Token``."""
    app = create_app(session, list(results), allowed_hosts=list(hosts))
    return app, TestClient(app, raise_server_exceptions=False, headers={"X-Geosteer-Token": app.state.token})


@pytest.fixture(scope="module")
def studio_env(tmp_path_factory):
    """``studio_env(name, seed=None, scale=0.5, model=None, results=(), hosts=("testserver",), keep=True,
    **session_kw)`` -> dict(model, tok, bank, session, app, client, token, root, ws): a fresh tiny Llama (or
    ``model=(model, tok)``) with :func:`installed_bank`, a session on ``root/ws`` and its app (``results``:
    names of folders under ``root`` it reads as result roots); ``keep`` saves the artifact ``kept``
    first. The surfaces come off the models at the end of the module."""
    models = []

    def make(name: str, *, seed: int | None = None, scale: float = 0.5, model=None, results=(),
             hosts=("testserver",), keep: bool = True, **session_kw) -> dict:
        torch.manual_seed(0)
        model, tok = model or geosteer.load_model("tiny-llama")
        models.append(model)
        bank = installed_bank(model, seed, scale)
        root = tmp_path_factory.mktemp(name)
        session = Session(model, tok, bank, root / "ws", model_name="tiny-llama", **session_kw)
        app, client = studio_client(session, [root / r for r in results], hosts)
        if keep:
            assert client.post("/api/save", json={"name": "kept"}).status_code == 200
        return dict(model=model, tok=tok, bank=bank, session=session, app=app, client=client,
                    token=app.state.token, root=root, ws=root / "ws")

    yield make
    for model in models:
        M.uninstall(model)
