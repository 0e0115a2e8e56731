"""lm-evaluation-harness model type ``geosteer``: offline, on the local tasks in tests/data/lm_eval.

Neutral settings must score exactly as lm_eval's stock ``hf`` model on the same weights; non-neutral
settings must score as a stock HF model with the same edit made by a plain torch forward hook.
"""

import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("lm_eval")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import lm_eval  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from geosteer.errors import GeosteerError  # noqa: E402
from geosteer.integrations.lm_eval import GeosteerLM  # noqa: E402

TASKS = Path(__file__).resolve().parents[1] / "data" / "lm_eval"
MC, PPL = "geosteer_test_mc", "geosteer_test_ppl"
ARGS = dict(dtype="float32", device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny Llama saved as a plain HF folder, plus neutral surfaces and gates made for it."""
    import geosteer.manifold as M
    from geosteer import load_model
    from geosteer.dynamics.gates import FFNGates
    from geosteer.models.tiny import tiny_model

    d = tmp_path_factory.mktemp("tiny-llama")
    m, tok = tiny_model("llama")
    m.save_pretrained(d / "model")
    tok.save_pretrained(d / "model")
    model, _ = load_model(str(d / "model"))
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))
    M.save(bank, d / "surfaces")
    M.uninstall(model)
    FFNGates.for_model(model).save(d / "gates")
    return d


@pytest.fixture(scope="module")
def tasks():
    return TaskManager(include_path=str(TASKS), include_defaults=False)


def _run(model, model_args, tm):
    return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=[MC, PPL], task_manager=tm,
                                   bootstrap_iters=0, log_samples=True, random_seed=0)


def _lls(res, task):
    out = []
    for s in res["samples"][task]:
        for r in s["resps"]:  # multiple choice: [(ll, is_greedy)]; rolling: [ll]
            out.append(float(r[0][0] if isinstance(r[0], (tuple, list)) else r[0]))
    return out


def _metrics(res):
    return {(t, k): v for t, d in res["results"].items() for k, v in d.items() if isinstance(v, float)}


def test_neutral_geosteer_scores_equal_stock_hf(folder, tasks):
    args = dict(pretrained=str(folder / "model"), **ARGS)
    stock = _run("hf", args, tasks)
    plain = _run("geosteer", args, tasks)
    neutral = _run("geosteer", dict(args, surfaces=str(folder / "surfaces"), gates=str(folder / "gates"),
                                    scale_site="attn_out", scale_par=1.0, scale_perp=1.0,
                                    mlp_variant="full", beta_attn=1.0, alpha_mlp=1.0), tasks)
    assert len(_lls(stock, MC)) == 24 and len(_lls(stock, PPL)) == 4
    # registered attention + no interventions: the same numbers, bit for bit
    assert _lls(plain, MC) == _lls(stock, MC)
    assert _lls(plain, PPL) == _lls(stock, PPL)
    assert _metrics(plain) == _metrics(stock)
    # every intervention at its neutral setting (zero surfaces, unit gates/scales): same to fp32 rounding
    for task in (MC, PPL):
        torch.testing.assert_close(torch.tensor(_lls(neutral, task)), torch.tensor(_lls(stock, task)),
                                   rtol=1e-5, atol=1e-4)
    m_n, m_s = _metrics(neutral), _metrics(stock)
    assert m_n.keys() == m_s.keys()
    for k in m_s:
        assert m_n[k] == pytest.approx(m_s[k], rel=1e-5), k


def _requests():
    pairs = [("Question: Which animal barks?\nAnswer:", " dog"),
             ("The river rises in the hills", " north of the town and flows south")]
    return [Instance(request_type="loglikelihood", doc={}, arguments=p, idx=i) for i, p in enumerate(pairs)]


def _reference_lls(folder, hook_module, hook):
    """Log-likelihoods from a stock HF model with a plain torch forward hook (independent of geosteer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    handle = hook_module(model).register_forward_hook(hook)
    out = []
    try:
        for inst in _requests():
            ctx, cont = inst.arguments
            c_ids = tok(ctx, add_special_tokens=False).input_ids
            t_ids = tok(ctx + cont, add_special_tokens=False).input_ids[len(c_ids):]
            ids = torch.tensor([c_ids + t_ids])
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0].float(), -1)
            out.append(sum(float(logp[len(c_ids) - 1 + i, t]) for i, t in enumerate(t_ids)))
    finally:
        handle.remove()
    return out


def _scale_attn_output(factor):
    def hook(mod, args, out):
        return (out[0] * factor, *out[1:])

    return hook


@pytest.mark.parametrize("model_args,module,hook", [
    (dict(beta_attn=0.5, gain_layers=1), lambda m: m.model.layers[1].self_attn, _scale_attn_output(0.5)),
    (dict(mlp_variant="zero", mlp_layers="2"), lambda m: m.model.layers[2].mlp,
     lambda mod, args, out: torch.zeros_like(out)),
])
def test_interventions_match_plain_hooks(folder, model_args, module, hook):
    path = str(folder / "model")
    lm = GeosteerLM(pretrained=path, **ARGS, **model_args)
    ours = [ll for ll, _ in lm.loglikelihood(_requests())]
    ref = _reference_lls(path, module, hook)
    stock = _reference_lls(path, module, lambda *a: None)
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(ref), rtol=1e-5, atol=1e-4)
    assert all(abs(a - b) > 1e-3 for a, b in zip(ours, stock, strict=True))  # the edit did something
    lm.remove_interventions()
    back = [ll for ll, _ in lm.loglikelihood(_requests())]
    torch.testing.assert_close(torch.tensor(back), torch.tensor(stock), rtol=1e-5, atol=1e-4)


def test_recipe_folder_as_model_args(folder, tmp_path):
    from geosteer.recipe import InterventionSpec, save_recipe

    path = str(folder / "model")
    spec = InterventionSpec(mlp_variant="zero", mlp_layers=2, gates=str(folder / "gates"))
    save_recipe(tmp_path / "recipe", spec, base_model=path)
    by_keys = GeosteerLM(pretrained=path, **ARGS, mlp_variant="zero", mlp_layers=2, gates=str(folder / "gates"))
    by_recipe = GeosteerLM(pretrained=path, **ARGS, recipe=str(tmp_path / "recipe"))
    assert [type(iv).__name__ for iv in by_recipe.interventions] == ["FFNVariant", "FFNGates"]
    assert [ll for ll, _ in by_recipe.loglikelihood(_requests())] == \
        [ll for ll, _ in by_keys.loglikelihood(_requests())]
    # keys on top of the recipe (as --recipe with --set): the gates dropped gives the variant alone
    on_top = GeosteerLM(pretrained=path, **ARGS, recipe=str(tmp_path / "recipe"), gates=None)
    alone = GeosteerLM(pretrained=path, **ARGS, mlp_variant="zero", mlp_layers=2)
    assert [type(iv).__name__ for iv in on_top.interventions] == ["FFNVariant"]
    assert [ll for ll, _ in on_top.loglikelihood(_requests())] == [ll for ll, _ in alone.loglikelihood(_requests())]


def test_geosteer_names_load_through_geosteer():
    lm = GeosteerLM(pretrained="tiny-gpt2", **ARGS, scale_site="mlp_out", scale_par=0.0, scale_layers="0;2")
    assert lm.model.config._geosteer_name == "tiny-gpt2"
    assert [type(iv).__name__ for iv in lm.interventions] == ["ComponentScale"]
    assert lm.interventions[0].config.layers == [0, 2]


@pytest.mark.parametrize("bad,msg", [
    (dict(scale_site="nowhere"), "unknown site"),
    (dict(mlp_variant="sideways"), "unknown FFN variant"),
    (dict(edits="x.json"), "edits= needs surfaces="),
    (dict(scale_site="attn_out", scale_layers="0-99"), "out of range"),
    (dict(recipe="some/folder", scale_site="attn_out"), "some/folder"),
])
def test_bad_model_args_fail_with_one_line(bad, msg):
    with pytest.raises((GeosteerError, ValueError), match=msg):
        GeosteerLM(pretrained="tiny-llama", **ARGS, **bad)
