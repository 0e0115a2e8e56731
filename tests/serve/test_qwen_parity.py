"""vLLM (CPU build, fp32) against geosteer's Hugging Face path on the real Qwen2.5-Coder-0.5B-Instruct
(``qwen2.5-0.5b``; skipped when its chunk packages are absent), same token ids.

One steered engine serves random surfaces, random steering vectors and the stock model, all in one mixed batch
of 20 prompts each; every request gets its own recipe's HF greedy tokens (>= 19/20 prompts), and next-token
log-probs within LOGPROB_TOL of HF's where both agree so far. Each recipe changes the HF greedy tokens of at least a
quarter of the prompts, so the check cannot pass by serving the stock model to everyone.
"""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("vllm")

from tests.serve.helpers import agreement, hf_reference, prompt_ids, random_surfaces, vllm_greedy  # noqa: E402

NAME = "qwen2.5-0.5b"
N_PROMPTS, NEW = 20, 8
# both sides fp32, but vLLM's CPU build runs its own matmul and attention kernels: sums in another order
LOGPROB_TOL = 1e-3
LLM_KW = dict(gpu_memory_utilization=0.15, max_model_len=128, max_num_seqs=64, seed=0, enforce_eager=True)
SURFACE_LAYERS = (4, 12, 20)
VECTOR_LAYERS = range(6, 12)


@pytest.fixture(scope="module")
def hf():
    from geosteer.models import loading

    if not loading._bundled_here(NAME):
        pytest.skip(f"{NAME}'s chunk packages are not installed: make qwen-0.5b")
    model, tok = loading.load_model(NAME)
    return model, prompt_ids(tok, N_PROMPTS)


@pytest.fixture(scope="module")
def recipe_dirs(hf, tmp_path_factory):
    """Random surfaces (grid 4 on [-3, 3], N(0, 1) coefficients, seed 0) on three layers, and random unit
    steering vectors (resid_post, seed 0) on layers 6-11 at scale 8, saved for qwen2.5-0.5b."""
    import torch

    from geosteer.recipe import InterventionSpec, save_recipe
    from geosteer.vectors.apply import SteeringVectors

    model = hf[0]
    root = tmp_path_factory.mktemp("qwen")
    d, n = model.config.hidden_size, model.config.num_hidden_layers
    gen = torch.Generator().manual_seed(0)
    vecs = {i: torch.nn.functional.normalize(torch.randn(d, generator=gen), dim=0) for i in VECTOR_LAYERS}
    vectors = str(SteeringVectors(vecs, base_model=NAME, d_model=d, n_layers=n).save(root / "vectors"))
    return {"surfaces": random_surfaces(model, root / "surfaces", layers=SURFACE_LAYERS),
            "vectors": str(save_recipe(root / "steer", InterventionSpec(vectors=vectors, vector_scale=8.0),
                                       base_model=NAME))}


def test_stock_and_recipes_in_one_mixed_batch_match_hf(hf, recipe_dirs):
    from geosteer_vllm import steered_llm

    model, prompts = hf
    names = [None, *recipe_dirs]
    # the references first: vLLM's CPU worker pins this process's torch to one thread for good once it starts
    refs = {name: hf_reference(model, prompts, None if name is None else recipe_dirs[name], NEW) for name in names}
    llm = steered_llm(NAME, recipe_dirs, **LLM_KW)
    order = [(name, i) for i in range(len(prompts)) for name in names]  # interleaved in one generate call
    got, got_lp = vllm_greedy(llm, [prompts[i] for _, i in order], NEW, [name for name, _ in order])
    del llm
    gc.collect()
    results = {}
    for name in names:
        rows = [k for k, (n, _) in enumerate(order) if n == name]
        (ref, ref_lp) = refs[name]
        results[name] = agreement(ref, [got[k] for k in rows], ref_lp, [got_lp[k] for k in rows])
    print(results)
    for name, (same, worst) in results.items():
        assert same >= N_PROMPTS - 1, f"{name}: {same}/{N_PROMPTS} prompts agree ({results})"
        assert worst < LOGPROB_TOL, f"{name}: log-prob difference {worst} ({results})"
    for name in recipe_dirs:
        moved = sum(a != b for a, b in zip(refs[name][0], refs[None][0], strict=True))
        print(name, "changes", moved, "greedy continuations")
        assert moved >= N_PROMPTS // 4, f"{name} changes only {moved}/{N_PROMPTS} greedy continuations"
