"""``geosteer studio --recipe/--set``: the recipe's surfaces (with its edits) are the bank the studio edits, its
other settings stay applied to the model underneath; bad settings are one line before the model loads."""

from __future__ import annotations

import pytest
import torch

import geosteer.cli  # noqa: F401 - the command first: it imports the verb modules (studio.cli among them)
from geosteer.interventions import steer
from tests.cli_helpers import one_line_exit_2, run_cli


@pytest.fixture()
def recipe(tiny_model, tmp_path):
    import geosteer.manifold as M
    from geosteer.recipe import InterventionSpec

    model, _ = tiny_model("llama")
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))
    M.uninstall(model)
    with torch.no_grad():
        bank.coefficients.normal_(0, 0.3, generator=torch.Generator().manual_seed(1))
    M.save(bank, tmp_path / "surfaces")
    spec = InterventionSpec(surfaces=str(tmp_path / "surfaces"), edits="set=0.5 layer=1 head=0",
                            scale_site="attn_out", scale_par=0.0, beta_attn=0.8)
    return spec.save(tmp_path / "recipe", base_model="tiny-llama"), tmp_path


def _by_hand(model, folder):
    """The recipe's interventions built from the method modules, not through the recipe."""
    import geosteer.manifold as M
    from geosteer.directional.sites import ComponentScale
    from geosteer.dynamics.variants import Gains
    from geosteer.manifold.edit import apply_edits

    bank = M.load(folder / "surfaces", model=model)
    apply_edits(bank, ["set=0.5 layer=1 head=0"])
    return [bank, ComponentScale("attn_out", 0.0, 1.0, None), Gains(0.8, 1.0, None)]


def test_studio_starts_from_the_recipe(recipe, tiny_model, monkeypatch, capsys):
    import uvicorn

    import geosteer.studio.server as server
    from geosteer import load_model

    folder, _ = recipe
    model, tok = load_model("tiny-llama")  # its own copy: the recipe stays attached to it
    seen = {}
    monkeypatch.setattr("geosteer.studio.cli.load", lambda name, **kw: (model, tok))
    monkeypatch.setattr(server, "create_app", lambda session, roots, **kw: seen.setdefault("session", session))

    class NoServer:
        def __init__(self, config):
            pass

        def run(self, sockets):
            for s in sockets:
                s.close()

    import socket

    monkeypatch.setattr("geosteer.studio.cli.listen_socket", lambda host, port: socket.create_server(("127.0.0.1", 0)))
    monkeypatch.setattr(uvicorn, "Server", NoServer)
    monkeypatch.setattr(uvicorn, "Config", lambda *a, **k: None)
    code, _, err = run_cli(monkeypatch, capsys, "studio", "-m", "tiny-llama", "--recipe", str(folder),
                           "--port", "8765", "--workspace", str(folder.parent / "ws"))
    assert code == 0, err
    session = seen["session"]
    ids = torch.arange(1, 12)[None]
    with torch.no_grad():
        ours = model(ids).logits  # the studio's bank and the recipe's other settings, as the session has them
    ref_model, _ = tiny_model("llama")
    with torch.no_grad(), steer(ref_model, *_by_hand(ref_model, folder)):
        ref = ref_model(ids).logits
    torch.testing.assert_close(ours, ref)
    assert session.bank.history and "set=0.5" in str(session.bank.history[-1])


@pytest.mark.parametrize("args, needle", [(("--set", "bogus=1"), "unknown recipe key"),
                                          (("--set", "beta_attn=x"), "beta_attn must be a number")])
def test_studio_bad_settings_before_the_model_loads(args, needle, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("geosteer.studio.cli.load", lambda *a, **k: pytest.fail("model loaded"))
    code, _, err = run_cli(monkeypatch, capsys, "studio", "-m", "tiny-llama", "--workspace", str(tmp_path / "w"),
                           *args)
    one_line_exit_2(code, err)
    assert needle in err


def test_the_studio_bank_takes_the_recipes_surfaces_strength(recipe, tiny_model):
    """``surfaces_strength`` scales the studio's bank after its edits; the other settings still build."""
    import geosteer.manifold as M
    from geosteer.errors import GeosteerError
    from geosteer.manifold.walls import Wall
    from geosteer.recipe import load_recipe
    from geosteer.studio.cli import apply_recipe_rest

    folder, tmp = recipe
    model, _ = tiny_model("llama")
    spec = load_recipe(folder)[0].with_values(surfaces_strength=0.5)
    bank = M.load(folder / "surfaces", model=model)
    (edited,) = _by_hand(model, folder)[:1]
    removes = apply_recipe_rest(model, bank, spec)
    try:
        torch.testing.assert_close(bank.coefficients, 0.5 * edited.coefficients, rtol=0, atol=0)
        assert len(removes) == 2  # the ∥/⊥ scaling and the gains
    finally:
        for r in reversed(removes):
            r()
    walled = M.load(folder / "surfaces", model=model)
    walled.set_walls([Wall(layer=1)])
    with pytest.raises(GeosteerError, match="surfaces_strength=0.5: these surfaces carry 1 exact wall"):
        apply_recipe_rest(model, walled, spec)
