"""Prefix / anchor / editing diagnostics (issue 13 item 3) against independent computations."""


import numpy as np
import pytest
import torch

from geosteer import load_model
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer.record import Recorder
from geosteer_paper.dynamics import editing, prefix
from tests.cli_helpers import run_cli


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model("llama")


def _rand(n, length, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 300, (length,), generator=g) for _ in range(n)]


def _np_angles(a, b):
    c = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return np.degrees(np.arccos(np.clip(c, -1, 1)))


def test_spread_matches_numpy_on_recorded_residuals(tiny):
    model, tok = tiny
    pre, suf = _rand(5, 7, 0), _rand(1, 4, 1)[0]
    rows = prefix.prefix_spread(model, pre, suf, tok.bos_token_id)
    ids = torch.stack(prefix.contexts(pre, suf, tok.bos_token_id))
    rec = Recorder(("resid_post",))
    with steer(model, rec), torch.no_grad():
        model(ids)
    for layer, row in enumerate(rows):
        u = rec["resid_post", layer][0][:, -1].double().numpy()
        pairs = [_np_angles(u[i], u[j]) for i in range(5) for j in range(i + 1, 5)]
        mean = u / np.linalg.norm(u, axis=1, keepdims=True)
        mean = mean.sum(0)
        assert row["pairwise_deg"] == pytest.approx(float(np.mean(pairs)), abs=1e-6)
        assert row["to_mean_deg"] == pytest.approx(float(np.mean([_np_angles(x, mean) for x in u])), abs=1e-6)
        assert row["pairwise_deg"] > 1.0  # different prefixes really move the last token


def test_same_prefix_gives_zero_spread_and_different_lengths_work(tiny):
    model, tok = tiny
    p = _rand(1, 6, 2)[0]
    rows = prefix.prefix_spread(model, [p, p.clone(), p.clone()], _rand(1, 3, 3)[0], tok.bos_token_id)
    assert max(r["pairwise_deg"] for r in rows) < 1e-3
    mixed = prefix.prefix_spread(model, [_rand(1, 4, 4)[0], _rand(1, 9, 5)[0]], _rand(1, 3, 3)[0], None)
    assert len(mixed) == anatomy(model).n_layers and all(r["n"] == 2 for r in mixed)


def test_anchor_scores_match_per_token_brute_force(tiny):
    model, tok = tiny
    ids = torch.stack(prefix.contexts(_rand(2, 6, 6), _rand(1, 3, 7)[0], tok.bos_token_id))
    layers = [0, 2]
    for score in ("raw", "relative"):
        fast = prefix.anchor_scores(model, ids, layers, score).numpy()
        slow = np.zeros(ids.shape)
        for i in range(ids.shape[1]):  # causal: the prefix ids[:, :i+1] gives token i its full-context state
            rec = Recorder(("mlp_in", "mlp_out"), layers)
            with steer(model, rec), torch.no_grad():
                model(ids[:, : i + 1])
            for layer in layers:
                x = rec["mlp_in", layer][0][:, -1].double().numpy()
                phi = rec["mlp_out", layer][0][:, -1].double().numpy()
                u = x / np.linalg.norm(x, axis=1, keepdims=True)
                tan = np.linalg.norm(phi - (phi * u).sum(1, keepdims=True) * u, axis=1)
                slow[:, i] += tan if score == "raw" else tan / np.linalg.norm(x, axis=1)
        np.testing.assert_allclose(fast, slow, rtol=1e-4, atol=1e-6)


def test_anchor_study_replaces_the_top_scored_prefix_tokens(tiny):
    model, tok = tiny
    pre, suf = _rand(3, 8, 8), _rand(1, 3, 9)[0]
    bos = tok.bos_token_id
    pool = torch.arange(3, 300)
    recs, summ, pos = prefix.anchor_study(model, pre, suf, bos, 2, [0, 1], pool, exclude_anchors=True)
    scores = prefix.anchor_scores(model, torch.stack(prefix.contexts(pre, suf, bos)))[:, 1:9].numpy()
    assert len(pos) == 3 * 2
    for r in pos:
        assert r["anchor_positions"] == sorted(np.argsort(-scores[r["prefix"]])[:2].tolist())
        assert not set(r["anchor_positions"]) & set(r["random_positions"])
    assert len(recs) == 3 * 2 * anatomy(model).n_layers
    # paired summary = mean of the per-pair records
    last = anatomy(model).n_layers - 1
    d = [r["anchor_deg"] - r["random_deg"] for r in recs if r["layer"] == last]
    assert summ[last]["diff_deg"] == pytest.approx(float(np.mean(d)))
    # the shift is the angle between the stock and the edited last-token direction: rebuild the edited
    # contexts from the recorded positions/tokens and recompute it with HF hidden states and numpy
    ctx = torch.stack(prefix.contexts(pre, suf, bos))
    with torch.no_grad():
        hs0 = model(ctx, output_hidden_states=True).hidden_states
    for p in pos:
        assert all(t in pool.tolist() for t in p["anchor_tokens"] + p["random_tokens"])
        for which in ("anchor", "random"):
            ids = ctx[p["prefix"]].clone()
            orig = ids[1 + np.array(p[f"{which}_positions"])].tolist()
            assert all(a != b for a, b in zip(orig, p[f"{which}_tokens"], strict=True))  # a real replacement
            ids[1 + np.array(p[f"{which}_positions"])] = torch.tensor(p[f"{which}_tokens"])
            with torch.no_grad():
                hs = model(ids[None], output_hidden_states=True).hidden_states
            for layer in range(anatomy(model).n_layers - 1):
                r = next(x for x in recs if (x["prefix"], x["seed"], x["layer"]) == (p["prefix"], p["seed"], layer))
                a, b = hs0[layer + 1][p["prefix"], -1], hs[layer + 1][0, -1]
                want = _np_angles(a.double().numpy(), b.double().numpy())
                assert r[f"{which}_deg"] == pytest.approx(float(want), abs=1e-3)


def test_last_token_states_match_output_hidden_states(tiny):
    model, _ = tiny
    ids = torch.stack(_rand(2, 9, 10))
    st = prefix.last_token_states(model, ids)
    with torch.no_grad():
        hs = model(ids, output_hidden_states=True).hidden_states
    for layer in range(st.shape[0] - 1):  # HF applies the final norm to the last entry
        torch.testing.assert_close(st[layer], hs[layer + 1][:, -1].double())


def test_neutral_edits_reproduce_stock_logits(tiny):
    model, _ = tiny
    ids = torch.stack(_rand(2, 6, 11))
    d = anatomy(model).d_model
    stock = editing.last_logits(model, ids)
    zero = torch.zeros(2, d, dtype=torch.float64)
    for iv in (editing.FFNOutEdit(1, zero), editing.DownColumnEdit(1, torch.tensor([0, 3]), zero)):
        assert torch.equal(editing.last_logits(model, ids, (iv,)), stock)


def test_down_column_hook_equals_weight_edit(tiny):
    model, _ = tiny
    ids = torch.stack(_rand(1, 6, 12))
    delta = torch.randn(1, anatomy(model).d_model, generator=torch.Generator().manual_seed(0)).double()
    hooked = editing.last_logits(model, ids, (editing.DownColumnEdit(2, torch.tensor([5]), delta),))
    w = editing.down_projection(model, 2).weight
    keep = w.detach().clone()
    try:
        with torch.no_grad():
            w[:, 5] += delta[0].float()
        edited = editing.last_logits(model, ids)
    finally:
        with torch.no_grad():
            w.copy_(keep)
    torch.testing.assert_close(hooked, edited, rtol=1e-5, atol=1e-5)


def test_random_edit_specificity_by_hand(tiny):
    """A seed-0 random ffn_out edit: logits via a plain forward hook on the MLP module, metrics in numpy."""
    model, _ = tiny
    ids = torch.stack(_rand(2, 6, 13))
    layer = 1
    recs, _ = editing.edit_study(model, ids, [layer], ["ffn_out"], seeds=[0], target_rank=3)
    mlp = anatomy(model).blocks[layer].mlp
    with torch.no_grad():
        base = model(ids).logits[:, -1].double().numpy()
        phi = {}
        h = mlp.register_forward_hook(lambda m, a, o: phi.__setitem__("x", o[:, -1].double().clone()))
        model(ids)
        h.remove()
    g = np.random.default_rng(0).standard_normal((2, anatomy(model).d_model))
    v = g / np.linalg.norm(g, axis=1, keepdims=True) * np.linalg.norm(phi["x"].numpy(), axis=1, keepdims=True)

    def add(m, a, o):
        o = o.clone()
        o[:, -1] += torch.from_numpy(v).to(o.dtype)
        return o

    h = mlp.register_forward_hook(add)
    with torch.no_grad():
        new = model(ids).logits[:, -1].double().numpy()
    h.remove()
    dz = new - base
    for b in range(2):
        t = int(np.argsort(-base[b], kind="stable")[3])
        others = np.delete(dz[b], t)
        move, drift = dz[b, t] - others.mean(), others.std(ddof=1)
        r = next(x for x in recs if x["edit"] == "random" and x["prompt"] == b)
        assert r["target"] == t
        assert r["target_move"] == pytest.approx(move, rel=1e-4, abs=1e-6)
        assert r["drift"] == pytest.approx(drift, rel=1e-4)
        assert r["specificity"] == pytest.approx(move / drift, rel=1e-3, abs=1e-5)


@pytest.mark.parametrize("family", ["gemma3", "llama"])
def test_edit_norm_is_sized_on_the_tensor_it_is_added_to(family):
    """ffn_out: ‖v‖ = scale·‖Φ_ℓ‖ (the residual update, after Gemma-3's post-FFN norm); down_col: scale·‖down
    projection output‖ (before that norm). Read here with plain hooks on the HF modules; the two coincide on
    Llama (no post-FFN norm) and differ on Gemma-3."""
    model, _ = load_model(f"tiny-{family}")
    ids = torch.stack(_rand(2, 6, 15))
    layer, scale = 1, 0.7
    recs, _ = editing.edit_study(model, ids, [layer], seeds=[0], scale=scale)
    blk = model.model.layers[layer]
    got = {}
    phi_mod = blk.post_feedforward_layernorm if family == "gemma3" else blk.mlp
    hs = [phi_mod.register_forward_hook(lambda m, a, o: got.__setitem__("phi", o[:, -1].double().clone())),
          blk.mlp.down_proj.register_forward_hook(lambda m, a, o: got.__setitem__("down", o[:, -1].double().clone()))]
    with torch.no_grad():
        model(ids)
    for h in hs:
        h.remove()
    want = {k: scale * np.linalg.norm(got[t].numpy(), axis=-1) for k, t in (("ffn_out", "phi"), ("down_col", "down"))}
    for r in recs:
        assert r["edit_norm"] == pytest.approx(want[r["kind"]][r["prompt"]], rel=1e-5)
    ratio = want["down_col"] / want["ffn_out"]
    if family == "gemma3":
        assert np.all(np.abs(ratio - 1) > 0.01)
    else:
        np.testing.assert_allclose(ratio, 1.0, rtol=1e-6)


def test_target_edit_beats_random(tiny):
    model, _ = tiny
    ids = torch.stack(_rand(3, 8, 14))
    _, summ = editing.edit_study(model, ids, [2], seeds=[0, 1, 2])
    by = {(s["kind"], s["edit"]): s["specificity"] for s in summ}
    for kind in editing.EDIT_KINDS:
        assert by[(kind, "target")] > 3 * abs(by[(kind, "random")])


@pytest.mark.parametrize("call, message", [
    (lambda m: prefix.anchor_study(m, _rand(2, 5, 0), _rand(1, 2, 1)[0], 1, 0, [0], torch.arange(5)), "k must"),
    (lambda m: prefix.anchor_study(m, _rand(2, 5, 0), _rand(1, 2, 1)[0], 1, 6, [0], torch.arange(5)), "too large"),
    (lambda m: prefix.prefix_spread(m, [], _rand(1, 2, 1)[0], 1), "at least one token"),
    (lambda m: editing.edit_study(m, torch.ones(1, 4, dtype=torch.long), [0], ["sideways"]), "unknown edit kind"),
    (lambda m: editing.edit_study(m, torch.ones(1, 4, dtype=torch.long), [0], scale=0.0), "scale must"),
])
def test_library_bad_input(tiny, call, message):
    from geosteer.errors import GeosteerError

    with pytest.raises(GeosteerError, match=message):
        call(tiny[0])


def test_cli_bad_input_exits_2(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    cases = [(["prefix-spread", "--prefix-file", str(empty)], "needs at least 2 non-blank lines"),
             (["anchors", "--k", "0"], "--k must be >= 1"),
             (["anchors", "--score-layers", "9"], "out of range"),
             (["edit-specificity", "--layers", "7"], "layer 7 out of range")]
    for argv, message in cases:
        code, _, err = run_cli(monkeypatch, capsys, "study", "dynamics", *argv, "-m", "tiny-llama")
        assert code == 2, argv
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_cli_writes_tidy_records(tmp_path, monkeypatch, capsys):
    import json

    pf = tmp_path / "p.txt"
    pf.write_text("The cat sat on the mat.\nA completely different opening line\nNumbers 1 2 3\n")
    out = tmp_path / "a.json"
    code, _, err = run_cli(monkeypatch, capsys, "study", "dynamics", "anchors", "-m", "tiny-llama",
                           "--prefix-file", str(pf), "--k", "1", "--seeds", "2", "--out", str(out))
    assert code == 0, err
    saved = json.loads(out.read_text())
    assert {r["table"] for r in saved["rows"]} == {"summary", "pairs", "positions"} and saved["meta"]["k"] == 1
