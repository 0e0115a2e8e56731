"""vLLM (CPU build, fp32) against geosteer's Hugging Face path on the default model, same token ids.

Stock vLLM gives the HF greedy tokens; one steered engine serving the shipped surfaces, the shipped
surfaces with exact walls, a directional recipe, a dynamics recipe, a value-space recipe, steering vectors
(two settings), a neutral recipe and an inline recipe, all in one mixed batch, gives each request its own
recipe's HF tokens (>= 19/20 prompts), next-token log-probs within 1e-3 where both agree.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from tests.serve.helpers import agreement, hf_greedy, prompt_ids, vllm_greedy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SURFACES = ROOT / "artifacts" / "smollm2-surfaces-all"
WALLS = ROOT / "artifacts" / "smollm2-walls-elements"  # surfaces on layers 8-15 with learned exact walls
N_PROMPTS, NEW = 20, 32
LLM_KW = dict(gpu_memory_utilization=0.15, max_model_len=256, max_num_seqs=160, seed=0, enforce_eager=True)
RECIPES = {  # recipe keys as on the geosteer command line
    "directional": dict(scale_site="attn_out", scale_par=1.3, scale_perp=0.9, scale_layers="4-20"),
    "dynamics": dict(mlp_variant="tangential", mlp_layers="10-14", alpha_mlp=1.1, gain_layers="20-25",
                     parallel_layers="3"),
    "value": dict(scale_site="value_full", scale_par=0.7, scale_layers="5-9"),
    "block": dict(scale_site="resid_post", scale_par=1.1, scale_layers="15"),
    "neutral": {},
}


@pytest.fixture(scope="module")
def hf():
    from geosteer.models.loading import load_model

    model, tok = load_model("smollm2")
    return model, prompt_ids(tok, N_PROMPTS)


VECTOR_RECIPES = {  # on the random vectors of the `vectors` fixture
    "vectors": dict(vector_scale=8.0),
    "vectors_phase": dict(vector_mode="ablate_add", vector_scale=6.0, vector_phase="generation", vector_from=4),
}
INLINE = {"vectors": "v", "vector_scale": -6, "scale_site": "attn_out", "scale_par": 0.8}  # an inline recipe


@pytest.fixture(scope="module")
def vectors(hf, tmp_path_factory):
    """Random unit steering vectors on layers 4-25 (resid_post, seed 0), saved for smollm2."""
    import torch

    from geosteer.vectors.apply import SteeringVectors

    d = hf[0].config.hidden_size
    gen = torch.Generator().manual_seed(0)
    vecs = {i: torch.nn.functional.normalize(torch.randn(d, generator=gen), dim=0) for i in range(4, 26)}
    return str(SteeringVectors(vecs, base_model="smollm2", d_model=d, n_layers=hf[0].config.num_hidden_layers)
               .save(tmp_path_factory.mktemp("v") / "vectors"))


@pytest.fixture(scope="module")
def recipe_dirs(tmp_path_factory, vectors):
    from geosteer.recipe import InterventionSpec, save_recipe

    root = tmp_path_factory.mktemp("recipes")
    out = {"surfaces": str(SURFACES), "walls": str(WALLS)}
    for name, keys in {**RECIPES, **{n: {**k, "vectors": vectors} for n, k in VECTOR_RECIPES.items()}}.items():
        out[name] = str(save_recipe(root / name, InterventionSpec(**keys), base_model="smollm2"))
    return out


def _hf_reference(model, prompts, folder):
    from geosteer_vllm.plan import spec_of

    spec, _ = spec_of(folder)
    return hf_greedy(model, prompts, NEW, spec.build(model))


def test_stock_vllm_matches_hf(hf):
    from geosteer_vllm import steered_llm

    model, prompts = hf
    ref, ref_lp = hf_greedy(model, prompts, NEW)
    llm = steered_llm("smollm2", **LLM_KW)
    got, got_lp = vllm_greedy(llm, prompts, NEW, [None] * len(prompts))
    del llm
    gc.collect()
    same, worst = agreement(ref, got, ref_lp, got_lp)
    assert same >= N_PROMPTS - 1, f"{same}/{N_PROMPTS} prompts agree"
    assert worst < 1e-3, worst


def test_recipes_in_one_mixed_batch_match_hf(hf, recipe_dirs, vectors):
    from geosteer.recipe import InterventionSpec
    from geosteer_vllm import steered_llm
    from geosteer_vllm.inline import Policy

    model, prompts = hf
    names = [*recipe_dirs, "inline"]
    llm = steered_llm("smollm2", recipe_dirs, Policy({"v": vectors}), **{**LLM_KW, "max_num_seqs": 256})
    # every prompt under every recipe and the stock model, interleaved in one generate call
    order = [(name, i) for i in range(len(prompts)) for name in [None, *names]]
    got, got_lp = vllm_greedy(llm, [prompts[i] for _, i in order], NEW,
                              [INLINE if name == "inline" else name for name, _ in order])
    del llm
    gc.collect()
    results = {}
    for name in [None, *names]:
        rows = [k for k, (n, _) in enumerate(order) if n == name]
        if name == "inline":
            spec = InterventionSpec(**{**INLINE, "vectors": vectors})
            ref, ref_lp = hf_greedy(model, prompts, NEW, spec.build(model))
        else:
            ref, ref_lp = (hf_greedy(model, prompts, NEW) if name is None
                           else _hf_reference(model, prompts, recipe_dirs[name]))
        results[name] = agreement(ref, [got[k] for k in rows], ref_lp, [got_lp[k] for k in rows])
    print(results)
    for name, (same, worst) in results.items():
        assert same >= N_PROMPTS - 1, f"{name}: {same}/{N_PROMPTS} prompts agree ({results})"
        assert worst < 1e-3, f"{name}: log-prob difference {worst} ({results})"
