"""The CI-sized serving check: a tiny Llama on vLLM (CPU build, fp32) against geosteer's Hugging Face path.

One engine serves every recipe kind (surfaces, surfaces with exact walls, directional at a residual site
and in value space, dynamics, a block-output edit, steering vectors at each hook point in every mode and
phase, a neutral recipe), two inline recipes (objects of recipe keys) and the stock model; 4 prompts x 8
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
    TINY_ENGINE,
    TINY_RECIPES,
    agreement,
    changes,
    hf_greedy,
    hf_reference,
    prompt_ids,
    random_surfaces,
    tiny_folder,
    tiny_recipe_dirs,
    vllm_greedy,
)

N_PROMPTS, NEW = 4, 8
VECTOR_LAYERS = {"resid_post": (0, 1, 2), "attn_out": (1,), "mlp_out": (0, 2), "resid_pre": (1, 2)}  # one artifact each
VECTOR_RECIPES = {  # every mode and phase, and vector_from; "vectors" names a point of VECTOR_LAYERS
    "vec_add": dict(vectors="resid_post", vector_scale=3.0),
    "vec_ablate_from": dict(vectors="attn_out", vector_mode="ablate_add", vector_scale=2.0, vector_from=5),
    "vec_norm_gen": dict(vectors="mlp_out", vector_mode="norm_match", vector_scale=4.0, vector_phase="generation"),
    "vec_prompt": dict(vectors="resid_pre", vector_mode="ablate", vector_phase="prompt", vector_layers="2"),
}
INLINE = {  # inline recipes (objects of recipe keys, artifacts by the names the engine was given)
    "inline_mix": {"vectors": "resid_post", "vector_scale": -2, "scale_site": "attn_out", "scale_par": 0.5},
    "inline_gen": {"vectors": "attn_out", "vector_scale": 5, "vector_phase": "generation", "alpha_mlp": 1.2},
}
RECIPES = {**TINY_RECIPES, "ffn_out": dict(scale_site="mlp_out", scale_par=1.8, scale_perp=0.7, scale_layers="2")}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The model folder vLLM loads, the same folder on geosteer's HF path, and its prompts."""
    from geosteer.models.loading import load_model

    folder = tiny_folder("llama", tmp_path_factory.mktemp("tiny-llama"))
    model, tok = load_model(folder)
    return model, prompt_ids(tok, N_PROMPTS), folder


@pytest.fixture(scope="module")
def vector_dirs(tiny, tmp_path_factory):
    """A random steering-vectors artifact per hook point of :data:`VECTOR_LAYERS` (seed 0), saved."""
    import torch

    from geosteer.vectors.apply import SteeringVectors

    model, root = tiny[0], tmp_path_factory.mktemp("vectors")
    gen = torch.Generator().manual_seed(0)
    d, n = model.config.hidden_size, model.config.num_hidden_layers
    return {point: str(SteeringVectors({i: 0.5 * torch.randn(d, generator=gen) for i in layers}, point=point,
                                       base_model="tiny-llama", d_model=d, n_layers=n).save(root / point))
            for point, layers in VECTOR_LAYERS.items()}


@pytest.fixture(scope="module")
def recipe_dirs(tiny, vector_dirs, tmp_path_factory):
    vec = {n: {**keys, "vectors": vector_dirs[keys["vectors"]]} for n, keys in VECTOR_RECIPES.items()}
    return tiny_recipe_dirs(tiny[0], tmp_path_factory.mktemp("recipes"), "tiny-llama", {**RECIPES, **vec})


def test_every_recipe_kind_in_one_mixed_batch_matches_hf(tiny, recipe_dirs, vector_dirs):
    from geosteer.recipe import InterventionSpec
    from geosteer.serve import steered_llm
    from geosteer.serve.inline import Policy

    model, prompts, folder = tiny
    names = [None, *recipe_dirs, *INLINE]
    refs = {n: hf_reference(model, prompts, None if n is None else recipe_dirs[n], NEW) for n in names
            if n not in INLINE}
    for n, keys in INLINE.items():
        spec = InterventionSpec(**{**keys, "vectors": vector_dirs[keys["vectors"]]})
        refs[n] = hf_greedy(model, prompts, NEW, spec.build(model))
    for n in names:
        if n not in (None, "neutral"):
            assert changes(refs[n], refs[None]), f"recipe {n} does not change the HF reference"
    unwalled = random_surfaces(model, recipe_dirs["walls"] + "-without", layers=(0,))
    assert changes(refs["walls"], hf_reference(model, prompts, unwalled, NEW)), "the walls change nothing"
    # 40 tokens and 16 requests per step: prompts are prefilled in chunks while earlier requests decode (mixed
    # batches); the surfaces' layer 0 takes the channel layout (another recipe has walls there), layer 2 the
    # shared keys
    llm = steered_llm(folder, recipe_dirs, Policy(vector_dirs),
                      **{**TINY_ENGINE, "max_num_seqs": 16, "max_num_batched_tokens": 40})
    order = [(n, i) for i in range(len(prompts)) for n in names]  # interleaved: every batch is mixed
    got, got_lp = vllm_greedy(llm, [prompts[i] for _, i in order], NEW, [INLINE.get(n, n) for n, _ in order])
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
