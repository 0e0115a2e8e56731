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
    TINY_ENGINE,
    agreement,
    changes,
    hf_reference,
    prompt_ids,
    tiny_folder,
    tiny_recipe_dirs,
    vllm_greedy,
)

N_PROMPTS, NEW = 4, 8


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "mistral", "gemma3"])
def test_family_serves_every_recipe_kind_like_hf(family, tmp_path):
    from geosteer.models.loading import load_model
    from geosteer_vllm import steered_llm

    folder = tiny_folder(family, tmp_path / family)
    model, tok = load_model(folder)
    prompts = prompt_ids(tok, N_PROMPTS)
    dirs = tiny_recipe_dirs(model, tmp_path, f"tiny-{family}")
    names = [None, *dirs]
    refs = {n: hf_reference(model, prompts, None if n is None else dirs[n], NEW) for n in names}
    for n in names:
        if n not in (None, "neutral"):
            assert changes(refs[n], refs[None]), f"{family}: recipe {n} does not change the HF reference"

    llm = steered_llm(folder, **TINY_ENGINE)
    stock = vllm_greedy(llm, prompts, NEW, [None] * N_PROMPTS)
    del llm
    gc.collect()
    llm = steered_llm(folder, dirs, **TINY_ENGINE)
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
