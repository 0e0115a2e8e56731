"""Every served family on vLLM (CPU build, fp32) against geosteer's Hugging Face path, on geosteer's tiny
models (widened to head_dim 32): Qwen2, Qwen3 (q/k norms), Mistral (sliding window) and Gemma3 (sandwich
norms, sliding windows; the tiny window of 8 tokens cuts the 16-token prompts). Llama is ``test_quick.py``.

Per family: a stock engine gives the HF greedy tokens; one steered engine serving surfaces, surfaces with
exact walls, directional, value-space and dynamics recipes and a neutral recipe, all interleaved in one
``generate`` call, gives each request its own recipe's HF tokens (4 prompts x 8 tokens, log-probs within
1e-3 where both agree), and the neutral recipe gives the stock engine's tokens exactly.
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

RECIPES = {  # tiny models have layers 0-2
    "directional": dict(scale_site="attn_out", scale_par=1.6, scale_perp=0.6, scale_layers="0-1"),
    "dynamics": dict(mlp_variant="tangential", mlp_layers="1", alpha_mlp=1.4, gain_layers="2",
                     parallel_layers="0"),
    "value": dict(scale_site="value_full", scale_par=0.3, scale_perp=1.5, scale_layers="1-2"),
    "block": dict(scale_site="resid_post", scale_par=1.3, scale_layers="1"),
    "neutral": {},
}


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "mistral", "gemma3"])
def test_family_serves_every_recipe_kind_like_hf(family, tmp_path):
    from geosteer.models.loading import load_model
    from geosteer.recipe import InterventionSpec, save_recipe
    from geosteer.serve import steered_llm

    folder = tiny_folder(family, tmp_path / family)
    model, tok = load_model(folder)
    prompts = prompt_ids(tok, N_PROMPTS)
    dirs = {"surfaces": random_surfaces(model, tmp_path / "surfaces"),
            "walls": random_surfaces(model, tmp_path / "walls", layers=(0,), walls=example_walls())}
    for name, keys in RECIPES.items():
        dirs[name] = str(save_recipe(tmp_path / name, InterventionSpec(**keys), base_model=f"tiny-{family}"))
    names = [None, *dirs]
    refs = {n: hf_reference(model, prompts, None if n is None else dirs[n], NEW) for n in names}
    for n in names:
        if n not in (None, "neutral"):
            assert changes(refs[n], refs[None]), f"{family}: recipe {n} does not change the HF reference"

    llm = steered_llm(folder, **LLM_KW)
    stock = vllm_greedy(llm, prompts, NEW, [None] * N_PROMPTS)
    del llm
    gc.collect()
    llm = steered_llm(folder, dirs, **LLM_KW)
    order = [(n, i) for i in range(N_PROMPTS) for n in names]  # interleaved: every batch is mixed
    got, got_lp = vllm_greedy(llm, [prompts[i] for _, i in order], NEW, [n for n, _ in order])
    del llm
    gc.collect()

    results = {"stock engine": agreement(refs[None][0], stock[0], refs[None][1], stock[1])}
    for n in names:
        rows = [k for k, (m, _) in enumerate(order) if m == n]
        results[n] = agreement(refs[n][0], [got[k] for k in rows], refs[n][1], [got_lp[k] for k in rows])
    print(family, results)
    neutral = [got[k] for k, (m, _) in enumerate(order) if m == "neutral"]
    assert neutral == stock[0], f"{family}: the neutral recipe's tokens differ from stock vLLM's"
    for n, (same, worst) in results.items():
        assert same == N_PROMPTS, f"{family} {n}: {same}/{N_PROMPTS} prompts agree ({results})"
        assert worst < 1e-3, f"{family} {n}: log-prob difference {worst} ({results})"
