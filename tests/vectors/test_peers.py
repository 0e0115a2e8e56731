"""geosteer.vectors against the peers where the definitions overlap: steering-vectors (mean-diff, PCA,
logistic probe, the ablation operators, min_token_index), repeng (pca_diff, normalize, the GGUF
control-vector file) and scikit-learn (the probe's objective).

Install the peers with ``pip install --no-deps steering-vectors==0.12.2 repeng`` (steering-vectors pins
transformers<5 and repeng 0.4.0, the newest on PyPI, uses ``np.float_``, removed in numpy 2: the test
restores that alias before importing it). A missing peer skips its tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import geosteer
from geosteer.vectors import extract, import_gguf
from geosteer.vectors.extract import probe

PAIRS = [
    ["I love this film, it is wonderful", "I hate this film, it is awful"],
    ["What a great day", "What a terrible day"],
    ["She was happy to see him again", "She was sad to see him again"],
    ["The food was delicious and warm", "The food was disgusting and cold"],
    ["Thank you, this is perfect", "No thanks, this is useless"],
    ["We won the match!", "We lost the match."],
]


@pytest.fixture
def llama(tiny_model):
    return tiny_model("llama")


def _sv():
    return pytest.importorskip("steering_vectors")


def _repeng():
    if not hasattr(np, "float_"):
        np.float_ = np.float64  # repeng 0.4.0 annotates with the numpy-1 alias
    return pytest.importorskip("repeng")


def _close(a, b, tol=1e-5):
    a, b = torch.as_tensor(np.array(a)).float(), torch.as_tensor(np.array(b)).float()
    torch.testing.assert_close(a, b, rtol=0, atol=tol * max(1.0, float(b.abs().max())))


@pytest.mark.parametrize("method", ["mean_diff", "pca"])
def test_mean_diff_and_pca_equal_steering_vectors(llama, method):
    sv = _sv()
    model, tok = llama
    agg = sv.mean_aggregator() if method == "mean_diff" else sv.pca_aggregator()
    theirs = sv.train_steering_vector(model, tok, [tuple(p) for p in PAIRS], layers=[0, 1, 2], aggregator=agg,
                                      batch_size=3)
    for batch_size in (1, 4):  # our batches are padded differently: the same vectors
        ours = extract(model, tok, PAIRS, layers="all", method=method, batch_size=batch_size)
        assert ours.point == "resid_post" and list(ours.vectors) == [0, 1, 2]
        for layer in range(3):
            _close(ours.vectors[layer], theirs.layer_activations[layer])
    if method == "pca":
        assert all(abs(n - 1) < 1e-5 for n in ours.norms().values())


@pytest.mark.parametrize(("point", "layer_type"), [("attn_out", "self_attn"), ("mlp_out", "mlp")])
def test_branch_points_equal_steering_vectors_layer_types(llama, point, layer_type):
    sv = _sv()
    model, tok = llama
    theirs = sv.train_steering_vector(model, tok, [tuple(p) for p in PAIRS], layers=[1, 2], layer_type=layer_type)
    ours = extract(model, tok, PAIRS, layers="1-2", point=point)
    for layer in (1, 2):
        _close(ours.vectors[layer], theirs.layer_activations[layer])


def test_probe_equals_steering_vectors_logistic_and_sklearn(llama):
    sv = _sv()
    lm = pytest.importorskip("sklearn.linear_model")
    model, tok = llama
    tight = {"tol": 1e-12, "max_iter": 100000}
    theirs = sv.train_steering_vector(model, tok, [tuple(p) for p in PAIRS], layers=[1],
                                      aggregator=sv.logistic_aggregator(tight))
    ours = extract(model, tok, PAIRS, layers=[1], method="probe")
    _close(ours.vectors[1], theirs.layer_activations[1], tol=1e-4)
    # unpaired sets, another C: sklearn on the centered data, written here
    gen = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(9, 16, generator=gen) + 0.3, torch.randn(5, 16, generator=gen)
    center = (pos.mean(0) + neg.mean(0)) / 2
    x = torch.cat([pos - center, neg - center]).double().numpy()
    y = np.r_[np.ones(9), -np.ones(5)]
    coef = lm.LogisticRegression(fit_intercept=False, C=0.5, **tight).fit(x, y).coef_[0]
    _close(probe(pos, neg, c=0.5, paired=False), coef / np.linalg.norm(coef), tol=1e-4)


def test_pca_diff_equals_repeng(llama):
    repeng = _repeng()
    model, tok = llama
    data = [repeng.DatasetEntry(positive=p, negative=n) for p, n in PAIRS]
    # repeng reads hidden_states[layer + 1]; for the last layer that is after the final norm, so layers 0-1
    theirs = repeng.ControlVector.train(model, tok, data, hidden_layers=[0, 1], batch_size=1, method="pca_diff")
    ours = extract(model, tok, PAIRS, layers="0-1", method="pca_diff")
    for layer in (0, 1):
        _close(ours.vectors[layer], theirs.directions[layer])
    # six pairs: at both layers three positives project above their negatives and three below (a tie),
    # so the sign comes from the PCA convention, matched too
    # repeng's pca_center is steering-vectors' PCA (pairs centered at their midpoints): our "pca", signed by
    # the mean projection (steering-vectors) rather than the majority (repeng): equal up to sign
    center = repeng.ControlVector.train(model, tok, data, hidden_layers=[0, 1], batch_size=1, method="pca_center")
    ours = extract(model, tok, PAIRS, layers="0-1", method="pca")
    for layer in (0, 1):
        theirs = torch.as_tensor(center.directions[layer])
        _close(ours.vectors[layer] * torch.sign(ours.vectors[layer] @ theirs), theirs)


def test_gguf_export_read_back_by_repeng_and_gguf(llama, tmp_path):
    repeng = _repeng()
    gguf = pytest.importorskip("gguf")
    model, tok = llama
    ours = extract(model, tok, PAIRS, layers="1-2", method="pca")
    path = ours.export_gguf(tmp_path / "happy.gguf")
    back = repeng.ControlVector.import_gguf(str(path))
    assert back.model_type == "llama" and sorted(back.directions) == [1, 2]
    for layer in (1, 2):
        _close(back.directions[layer], ours.vectors[layer], tol=0)
    reader = gguf.GGUFReader(str(path))
    assert int(reader.get_field("controlvector.layer_count").parts[-1][0]) == 2
    mine = import_gguf(path)
    assert mine.point == "resid_post" and mine.model_type == "llama" and mine.d_model == 64
    for layer in (1, 2):
        assert torch.equal(mine.vectors[layer], ours.vectors[layer])
    with pytest.raises(geosteer.errors.GeosteerError, match="resid_post"):
        extract(model, tok, PAIRS, layers=[1], point="mlp_out").export_gguf(tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def _logits(model, ids, *ivs):
    with torch.no_grad(), geosteer.steer(model, *ivs):
        return model(input_ids=ids).logits


@pytest.mark.parametrize(("mode", "op"), [("add", None), ("ablate", "ablation_operator"),
                                          ("ablate_add", "ablation_then_addition_operator")])
def test_apply_equals_steering_vectors(llama, mode, op):
    sv = _sv()
    model, tok = llama
    ours = extract(model, tok, PAIRS, layers="0-1")
    ids = tok(["The weather today is"] * 2, return_tensors="pt").input_ids
    theirs = sv.SteeringVector({k: v.clone() for k, v in ours.vectors.items()}, "decoder_block")
    operator = getattr(sv, op)() if op else None
    for scale, start in ((3.0, 0), (-2.0, 2)):
        with torch.no_grad(), theirs.apply(model, multiplier=scale, operator=operator, min_token_index=start):
            ref = model(input_ids=ids).logits
        got = _logits(model, ids, ours.with_(scale=scale, mode=mode, from_token=start))
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
        assert not torch.allclose(got, _logits(model, ids), atol=1e-3)


def test_norm_match_equals_repeng_normalize(llama):
    repeng = _repeng()
    model, tok = geosteer.load_model("tiny-llama")  # repeng's ControlModel rewraps the layers: a fresh copy
    ours = extract(model, tok, PAIRS, layers="0-1", method="pca_diff")
    ids = tok(["The weather today is"], return_tensors="pt").input_ids
    got = _logits(model, ids, ours.with_(scale=2.5, mode="norm_match"))
    cm = repeng.ControlModel(model, [0, 1])
    cm.set_control(repeng.ControlVector("llama", {k: v.numpy() for k, v in ours.vectors.items()}), 2.5,
                   normalize=True)
    with torch.no_grad():
        ref = cm(input_ids=ids).logits
    cm.unwrap()
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
    assert not torch.allclose(got, _logits(model, ids), atol=1e-3)
