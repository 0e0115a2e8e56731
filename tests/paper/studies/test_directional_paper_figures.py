"""paper/studies/directional/paper_figures.py (Fig. 1, Fig. 11, Table 11) against independent computations: numpy
correlations on a hand-made CSV, plain torch hooks / output_hidden_states on tiny-llama, the cosine formula
written out here; and bad input → one line, exit 2, nothing written."""

import csv
import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import rankdata

from studies.directional.paper_figures import (
    SITES,
    cosine_check,
    fig1_layer_summary,
    fig1_rows,
    fig11_rows,
    main,
    read_layer_csv,
    table11_rows,
)


def _write_csv(path, n_layers=6, methods=("awq4", "wanda2:4"), seed=0, shuffle=True):
    rng = np.random.default_rng(seed)
    rows = []
    for meth in methods:
        for layer in range(n_layers):
            for site in SITES:
                perp, par = rng.uniform(0.1, 0.8, size=2)
                rows.append({"method": meth, "layer": layer, "site": site, "n_tokens": 10, "perp_err_mean": perp,
                             "par_err_mean": par, "total_err_mean": math.hypot(perp, par) * rng.uniform(0.9, 1.0)})
    if shuffle:
        rows = [rows[i] for i in rng.permutation(len(rows))]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


def _spearman(a, b):
    return float(np.corrcoef(rankdata(a), rankdata(b))[0, 1])


def test_table11_statistics_equal_numpy_on_a_hand_made_csv(tmp_path):
    raw = _write_csv(tmp_path / "layers.csv")
    out = table11_rows(read_layer_csv(tmp_path / "layers.csv"))
    assert sorted((r["method"], r["site"]) for r in out) == sorted((m, s) for m in ("awq4", "wanda2:4") for s in SITES)
    for r in out:
        rs = sorted((x for x in raw if x["method"] == r["method"] and x["site"] == r["site"]), key=lambda x: x["layer"])
        e = np.array([x["total_err_mean"] for x in rs])
        ep = np.array([x["perp_err_mean"] for x in rs])
        ea = np.array([x["par_err_mean"] for x in rs])
        assert r["n_layers"] == 6
        assert r["pearson_e_perp"] == pytest.approx(float(np.corrcoef(e, ep)[0, 1]), abs=1e-12)
        assert r["spearman_e_perp"] == pytest.approx(_spearman(e, ep), abs=1e-12)
        assert r["spearman_e_par"] == pytest.approx(_spearman(e, ea), abs=1e-12)
        assert r["perp_over_total"] == pytest.approx(float(np.mean(ep / e)), abs=1e-12)
        assert r["par_over_total"] == pytest.approx(float(np.mean(ea / e)), abs=1e-12)
    only = table11_rows(read_layer_csv(tmp_path / "layers.csv"), ["mlp"])
    assert [r["site"] for r in only] == ["mlp", "mlp"]


def test_cosine_check_equals_its_formula_and_an_independent_cosine():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, 16, generator=g, dtype=torch.float64)
    scale = torch.tensor([1e-3, 1e-2, 0.1, 0.5, 3.0], dtype=torch.float64)[:, None, None]
    y = x + scale * torch.randn(5, 7, 16, generator=g, dtype=torch.float64)
    c = cosine_check(x.float(), y.float())
    xn, yn = x.float().double().numpy(), y.float().double().numpy()
    exact = (xn * yn).sum(-1) / (np.linalg.norm(xn, axis=-1) * np.linalg.norm(yn, axis=-1))
    np.testing.assert_allclose(c["exact"].numpy(), exact, rtol=0, atol=1e-12)
    d = yn - xn
    alpha = (d * xn).sum(-1) / (xn * xn).sum(-1)
    perp = np.linalg.norm(d - alpha[..., None] * xn, axis=-1)
    t = perp / np.linalg.norm((1 + alpha)[..., None] * xn, axis=-1)
    np.testing.assert_allclose(c["t"].numpy(), t, rtol=1e-10)
    np.testing.assert_allclose(c["approx"].numpy(), 1 - 0.5 * t ** 2, rtol=1e-10)
    # exact identity cos = sign(1+α)/√(1+t²); the approximation's error is ≈ 3/8 t⁴ where t is small
    np.testing.assert_allclose(exact, np.sign(1 + alpha) / np.sqrt(1 + t ** 2), atol=1e-12)
    small = t < 0.1
    assert small.any() and (~small).any()
    err = np.abs(exact - (1 - 0.5 * t ** 2))
    assert np.all(err[small] <= 0.38 * t[small] ** 4 + 1e-12)


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model("llama")


def _plain_capture(model, ids):
    """Per layer: block input x, attention output A and MLP output Φ, from plain torch hooks, plus
    output_hidden_states."""
    cap, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        handles.append(layer.register_forward_pre_hook(
            lambda mod, args, kwargs, i=i: cap.__setitem__((i, "x"), (args[0] if args else kwargs["hidden_states"])
                                                           .detach().double()), with_kwargs=True))
        handles.append(layer.register_forward_hook(
            lambda mod, args, out, i=i: cap.__setitem__((i, "out"), (out[0] if isinstance(out, tuple) else out)
                                                        .detach().double())))
        handles.append(layer.self_attn.register_forward_hook(
            lambda mod, args, out, i=i: cap.__setitem__((i, "A"), out[0].detach().double())))
        handles.append(layer.mlp.register_forward_hook(
            lambda mod, args, out, i=i: cap.__setitem__((i, "F"), out.detach().double())))
    try:
        with torch.no_grad():
            hs = model(input_ids=ids[None], use_cache=False, output_hidden_states=True).hidden_states
    finally:
        for h in handles:
            h.remove()
    return cap, [h[0].double() for h in hs]


def test_fig11_rel_norm_and_cosine_equal_plain_hooks(tiny):
    m, _ = tiny
    g = torch.Generator().manual_seed(1)
    windows = [torch.randint(0, m.config.vocab_size, (12,), generator=g) for _ in range(3)]
    per, summ = fig11_rows(m, windows)
    n_layers = m.config.num_hidden_layers
    ref = {(layer, s): [] for layer in range(n_layers) for s in SITES}
    cos_ref = {layer: [] for layer in range(n_layers)}
    err_ref = {layer: [] for layer in range(n_layers)}
    for ids in windows:
        cap, hs = _plain_capture(m, ids)
        for layer in range(n_layers):
            x = hs[layer]
            y = hs[layer + 1] if layer + 1 < n_layers else cap[(layer, "out")][0]  # hs[-1] is after the final norm
            np.testing.assert_allclose(x.numpy(), cap[(layer, "x")][0].numpy(), atol=1e-6)
            ref[(layer, "block")].append(((y - x).norm(dim=-1) / x.norm(dim=-1)).numpy())
            a = cap[(layer, "A")][0]
            ref[(layer, "attn")].append((a.norm(dim=-1) / x.norm(dim=-1)).numpy())
            ref[(layer, "mlp")].append((cap[(layer, "F")][0].norm(dim=-1) / (x + a).norm(dim=-1)).numpy())
            cos_ref[layer].append(torch.nn.functional.cosine_similarity(x, y, dim=-1).numpy())
            xn, dn = x.numpy(), (y - x).numpy()
            alpha = (dn * xn).sum(-1) / (xn * xn).sum(-1)
            t = np.linalg.norm(dn - alpha[:, None] * xn, axis=-1) / (np.abs(1 + alpha) * np.linalg.norm(xn, axis=-1))
            err_ref[layer].append(np.abs(cos_ref[layer][-1] - (1 - 0.5 * t ** 2)))
    assert len(per) == 3 * n_layers * 3 and len(summ) == n_layers * 3
    for r in summ:
        vals = ref[(r["layer"], r["site"])]
        allv = np.concatenate(vals)
        assert r["n_tokens"] == allv.size == 36
        assert r["rel_norm_mean"] == pytest.approx(allv.mean(), rel=1e-5)
        assert r["rel_norm_std_tokens"] == pytest.approx(allv.std(), rel=1e-4)
        assert r["rel_norm_std_windows"] == pytest.approx(np.std([v.mean() for v in vals]), rel=1e-4, abs=1e-7)
        assert r["rel_norm_max"] == pytest.approx(allv.max(), rel=1e-5)
        if r["site"] == "block":
            assert r["cos_exact_mean"] == pytest.approx(np.concatenate(cos_ref[r["layer"]]).mean(), abs=1e-5)
            assert r["n_cos_negative"] == int((np.concatenate(cos_ref[r["layer"]]) <= 0).sum())
            errs = err_ref[r["layer"]]
            assert r["cos_abs_err_max"] == pytest.approx(np.concatenate(errs).max(), rel=1e-5)
            assert r["cos_abs_err_max_rest"] == pytest.approx(max(e[1:].max() for e in errs), rel=1e-5)
            assert r["frac_cos_err_gt_0.01"] == pytest.approx((np.concatenate(errs) > 0.01).mean())
            assert r["rel_norm_first_mean"] == pytest.approx(np.mean([v[0] for v in vals]), rel=1e-5)
            assert r["rel_norm_mean_rest"] == pytest.approx(np.concatenate([v[1:] for v in vals]).mean(), rel=1e-5)


def test_fig1_rows_equal_a_full_forward_over_the_generated_tokens(tiny):
    m, tok = tiny
    prompts = ["The capital of France is", "Water boils at"]
    per, summ, gens = fig1_rows(m, tok, prompts, [0, 2], 3, log=lambda *_: None)
    assert [g["steps"] for g in gens] == [3, 3]
    for i, p in enumerate(prompts):
        enc = tok(p, return_tensors="pt")
        with torch.no_grad():
            full = m.generate(**enc, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)[0]
        cap, _ = _plain_capture(m, full[:-1])  # the last token is never fed
        q = enc.input_ids.shape[1]
        for layer in (0, 2):
            x, y = cap[(layer, "x")][0], cap[(layer, "out")][0]
            d = y - x
            alpha = (d * x).sum(-1) / (x * x).sum(-1)
            par = alpha[:, None] * x
            ratio = (par.norm(dim=-1) / (d - par).norm(dim=-1)).numpy()
            rows = {r["step"]: r for r in per if r["prompt"] == i and r["layer"] == layer}
            assert sorted(rows) == [0, 1, 2]
            assert rows[0]["ratio_mean"] == pytest.approx(ratio[:q].mean(), rel=1e-4)
            assert rows[0]["n_tokens"] == q
            for s in (1, 2):
                assert rows[s]["ratio_mean"] == pytest.approx(ratio[q + s - 1], rel=1e-3)
    for r in summ:
        sel = [x["ratio_mean"] for x in per if x["step"] == r["step"] and x["layer"] == r["layer"]]
        assert r["ratio_mean"] == pytest.approx(np.mean(sel)) and r["ratio_std_prompts"] == pytest.approx(np.std(sel))


def test_fig1_layer_summary_pools_generated_tokens():
    per = [{"prompt": p, "step": s, "layer": 3, "ratio_mean": 0.1 * (p + 1) * (s + 1), "alpha_mean": (-1) ** s * 0.5}
           for p in range(2) for s in range(4)]
    (r,) = fig1_layer_summary(per, [3])
    gen = [0.1 * (p + 1) * (s + 1) for p in range(2) for s in range(1, 4)]
    assert r["generated_ratio_mean"] == pytest.approx(np.mean(gen))
    assert r["generated_ratio_std"] == pytest.approx(np.std(gen))
    assert r["generated_ratio_max"] == pytest.approx(max(gen)) and r["n_generated"] == 6
    assert r["frac_alpha_positive"] == pytest.approx(2 / 6)  # step 2 of each prompt (step 0 is the prompt)
    assert r["prompt_ratio_mean"] == pytest.approx(np.mean([0.1, 0.2]))


def test_tiny_run_writes_json_and_html(tmp_path):
    _write_csv(tmp_path / "layers.csv", n_layers=4)
    out = tmp_path / "pf.json"
    args = ["-m", "tiny-llama", "--fig1-layers", "0,2", "--fig1-prompts", "2", "--max-new-tokens", "2", "--prompts",
            "2", "--prompt-len", "8", "--compression-csv", str(tmp_path / "layers.csv"), "--out", str(out)]
    main(args)
    doc = json.loads(out.read_text())
    assert doc["meta"]["command"] == "python paper/studies/directional/paper_figures.py " + " ".join(args)
    assert {r["layer"] for r in doc["fig1"]} == {0, 2} and len(doc["fig11"]) == 3 * 3
    assert len(doc["table11"]) == 2 * 3 and [r["setting"] for r in doc["table11_paper"]][0] == "Quantization"
    assert "plotly" in out.with_suffix(".html").read_text()


@pytest.mark.parametrize("extra, msg", [
    (["--parts", "table11", "--compression-csv", "nope.csv"], "error: compression CSV not found: nope.csv"),
    (["--parts", "table11", "--sites", "attn,resid"], "error: unknown site 'resid'"),
    (["--parts", "fig1", "-m", "tiny-llama", "--fig1-layers", "0,9"], "error: "),
    (["--parts", "fig2"], "error: unknown part 'fig2'"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, monkeypatch, extra, msg):
    monkeypatch.chdir(tmp_path)
    _write_csv(tmp_path / "layers.csv", n_layers=3)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["--compression-csv", "layers.csv", *extra, "--out", "x.json"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith(msg) and err.count("\n") == 1, err
    if "--fig1-layers" in extra:
        assert "layer" in err and "9" in err
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "x.html").exists()


def test_table11_carries_the_summary_spearman_rows_the_ladder_reads(tmp_path):
    """The across-method ρ of the summary beside the CSV lands in the Table-11 file's meta, where the scale
    ladder's item 3.21 reads it (ρ(⊥) − ρ(∥), attention); without a summary the meta has none."""
    from geosteer_paper.reproduction.ladder import _read, load_ladder

    _write_csv(tmp_path / "layers.csv", n_layers=4)
    main(["--parts", "table11", "--compression-csv", str(tmp_path / "layers.csv"), "--out", str(tmp_path / "a.json")])
    assert "spearman" not in json.loads((tmp_path / "a.json").read_text())["meta"]
    rho = [{"site": s, "error": e, "spearman_rho_vs_ppl": v, "p_value": 0.5, "n_methods": 3}
           for s in SITES for e, v in (("perp_err", 0.9), ("par_err", -0.3), ("total_err", 0.1))]
    (tmp_path / "compression_summary.json").write_text(json.dumps(
        {"meta": {"spearman": rho, "spearman_quantisers": rho[:3], "command": "x"}, "rows": []}))
    main(["--parts", "table11", "--compression-csv", str(tmp_path / "layers.csv"), "--out", str(tmp_path / "b.json")])
    meta = json.loads((tmp_path / "b.json").read_text())["meta"]
    assert meta["spearman"] == rho and meta["spearman_quantisers"] == rho[:3] and meta["command"] != "x"
    (item,) = [it for it in load_ladder().items if it.id == "3.21"]
    assert _read(item, tmp_path / "b.json") == pytest.approx(0.9 - (-0.3))


def test_table11_malformed_summary_is_one_line_exit_2(tmp_path, capsys):
    _write_csv(tmp_path / "layers.csv", n_layers=3)
    (tmp_path / "compression_summary.json").write_text("[1, 2]")
    with pytest.raises(SystemExit) as e:
        main(["--parts", "table11", "--compression-csv", str(tmp_path / "layers.csv"),
              "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "has no meta object" in err and err.count("\n") == 1, err
    assert not (tmp_path / "x.json").exists()
