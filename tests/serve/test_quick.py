"""The CI-sized serving check: a tiny Llama on vLLM (CPU build, fp32) against geosteer's Hugging Face path.

One engine serves every recipe kind (surfaces, surfaces with exact walls, directional at a residual site
and in value space, dynamics, a block-output edit, a neutral recipe) and the stock model; 4 prompts x 8
greedy tokens under each, all interleaved in one ``generate`` call, then a stock batch and a surfaces batch
alone. Each request must get its own recipe's HF tokens, with next-token log-probs within 1e-3 where both
agree, and every non-neutral recipe must change the HF reference (so a recipe that is silently dropped
fails; the walls also change their surfaces' reference). The full check on the default model is
``test_parity.py``, the other families ``test_models.py``.
"""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("vllm")

from tests.serve.helpers import (  # noqa: E402
    agreement,
    changes,
    example_walls,
    hf_reference,
    prompt_ids,
    random_surfaces,
    tiny_folder,
    vllm_greedy,
)

N_PROMPTS, NEW = 4, 8
LLM_KW = dict(gpu_memory_utilization=0.05, max_model_len=64, max_num_seqs=64, seed=0, enforce_eager=True)
RECIPES = {  # recipe keys as on the geosteer command line; tiny-llama has layers 0-2
    "directional": dict(scale_site="attn_out", scale_par=1.6, scale_perp=0.6, scale_layers="0-1"),
    "dynamics": dict(mlp_variant="tangential", mlp_layers="1", alpha_mlp=1.4, gain_layers="2",
                     parallel_layers="0"),
    "value": dict(scale_site="value_full", scale_par=0.3, scale_perp=1.5, scale_layers="1-2"),
    "ffn_out": dict(scale_site="mlp_out", scale_par=1.8, scale_perp=0.7, scale_layers="2"),
    "block": dict(scale_site="resid_post", scale_par=1.3, scale_layers="1"),
    "neutral": {},
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The model folder vLLM loads, the same folder on geosteer's HF path, and its prompts."""
    from geosteer.models.loading import load_model

    folder = tiny_folder("llama", tmp_path_factory.mktemp("tiny-llama"))
    model, tok = load_model(folder)
    return model, prompt_ids(tok, N_PROMPTS), folder


@pytest.fixture(scope="module")
def recipe_dirs(tiny, tmp_path_factory):
    from geosteer.recipe import InterventionSpec, save_recipe

    model = tiny[0]
    root = tmp_path_factory.mktemp("recipes")
    out = {"surfaces": random_surfaces(model, root / "surfaces"),
           "walls": random_surfaces(model, root / "walls", layers=(0,), walls=example_walls())}
    for name, keys in RECIPES.items():
        out[name] = str(save_recipe(root / name, InterventionSpec(**keys), base_model="tiny-llama"))
    return out


def test_every_recipe_kind_in_one_mixed_batch_matches_hf(tiny, recipe_dirs):
    from geosteer.serve import steered_llm

    model, prompts, folder = tiny
    names = [None, *recipe_dirs]
    refs = {n: hf_reference(model, prompts, None if n is None else recipe_dirs[n], NEW) for n in names}
    for n in names:
        if n not in (None, "neutral"):
            assert changes(refs[n], refs[None]), f"recipe {n} does not change the HF reference"
    unwalled = random_surfaces(model, recipe_dirs["walls"] + "-without", layers=(0,))
    assert changes(refs["walls"], hf_reference(model, prompts, unwalled, NEW)), "the walls change nothing"
    llm = steered_llm(folder, recipe_dirs, **LLM_KW)
    order = [(n, i) for i in range(len(prompts)) for n in names]  # interleaved: every batch is mixed
    got, got_lp = vllm_greedy(llm, [prompts[i] for _, i in order], NEW, [n for n, _ in order])
    # batches of one kind: stock requests skip the key features, surfaces requests fill every row
    alone = {n: vllm_greedy(llm, prompts, NEW, [n] * len(prompts)) for n in (None, "surfaces")}
    del llm
    gc.collect()
    results = {}
    for n in names:
        rows = [k for k, (m, _) in enumerate(order) if m == n]
        ref, ref_lp = refs[n]
        results[n] = agreement(ref, [got[k] for k in rows], ref_lp, [got_lp[k] for k in rows])
    for n, (toks, lps) in alone.items():
        results[f"{n} alone"] = agreement(refs[n][0], toks, refs[n][1], lps)
    print(results)
    for n, (same, worst) in results.items():
        assert same == N_PROMPTS, f"{n}: {same}/{N_PROMPTS} prompts agree ({results})"
        assert worst < 1e-3, f"{n}: log-prob difference {worst} ({results})"
