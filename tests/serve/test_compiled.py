"""Steering inside vLLM's compiled graph (``serve.graph``): a tiny Llama on vLLM's CPU build with its
torch.compile on (``enforce_eager=False``), against geosteer's Hugging Face path.

One compiled engine serves random surfaces (the shared-key path), ``value_full`` scaling, steering vectors at
every hook point in every mode and phase (and with ``vector_from``), ∥/⊥ scaling at the residual sites,
learned per-layer scales, FFN variants with gains and a parallel layer, and two inline recipes; 4 prompts x 8
greedy tokens under each, interleaved in one ``generate`` call with a small token budget per step (prefill
chunks beside decoding tokens). Every request must get its own recipe's HF tokens, log-probs within 1e-3, and
each recipe must change the HF reference. The tables alone are checked against the recipes' edit functions in
``test_graph.py`` (no engine; in ``make serve-ci``).
"""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("vllm")

from tests.serve.helpers import (  # noqa: E402
    TINY_ENGINE,
    agreement,
    changes,
    hf_greedy,
    hf_reference,
    prompt_ids,
    random_vector_dirs,
    tiny_folder,
    tiny_recipe_dirs,
    vllm_greedy,
)

N_PROMPTS, NEW = 4, 8
VECTOR_LAYERS = {"resid_post": (0, 1, 2), "attn_out": (1,), "mlp_out": (0, 2), "resid_pre": (1, 2)}
VECTOR_RECIPES = {
    "vec_add": dict(vectors="resid_post", vector_scale=3.0),
    "vec_ablate_from": dict(vectors="attn_out", vector_mode="ablate_add", vector_scale=2.0, vector_from=5),
    "vec_norm_gen": dict(vectors="mlp_out", vector_mode="norm_match", vector_scale=4.0, vector_phase="generation"),
    "vec_prompt": dict(vectors="resid_pre", vector_mode="ablate", vector_phase="prompt", vector_layers="2"),
}
RECIPES = {  # with the surfaces (shared-key path) and value_full: every one runs in the compiled graph
    "value": dict(scale_site="value_full", scale_par=0.3, scale_perp=1.5, scale_layers="1-2"),
    "directional": dict(scale_site="attn_out", scale_par=1.6, scale_perp=0.6, scale_layers="0-1"),
    "dynamics": dict(mlp_variant="tangential", mlp_layers="1", alpha_mlp=1.4, gain_layers="2",
                     parallel_layers="0"),
    "radial": dict(mlp_variant="radial", mlp_layers="0,2"),
    "block": dict(scale_site="resid_post", scale_par=1.3, scale_layers="1"),
    "ffn_out": dict(scale_site="mlp_out", scale_par=1.8, scale_perp=0.7, scale_layers="2"),
    "neutral": {},
}
INLINE = {
    "inline_mix": {"vectors": "resid_post", "vector_scale": -2, "scale_site": "attn_out", "scale_par": 0.5},
    "inline_gen": {"vectors": "attn_out", "vector_scale": 5, "vector_phase": "generation", "alpha_mlp": 1.2},
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from geosteer.models.loading import load_model

    folder = tiny_folder("llama", tmp_path_factory.mktemp("tiny-llama"))
    model, tok = load_model(folder)
    return model, prompt_ids(tok, N_PROMPTS), folder


@pytest.fixture(scope="module")
def vector_dirs(tiny, tmp_path_factory):
    return random_vector_dirs(tiny[0], tmp_path_factory.mktemp("vectors"), VECTOR_LAYERS)


@pytest.fixture(scope="module")
def recipe_dirs(tiny, vector_dirs, tmp_path_factory):
    from geosteer.directional.learned import LearnedScales
    from geosteer.directional.scales_artifact import save_scales

    vec = {n: {**keys, "vectors": vector_dirs[keys["vectors"]]} for n, keys in VECTOR_RECIPES.items()}
    root = tmp_path_factory.mktemp("recipes")
    learned = save_scales(LearnedScales("mlp_out", [0, 2], [1.6, 0.5], [0.7, 1.4]), root / "scales",
                          base_model="tiny-llama")
    dirs = tiny_recipe_dirs(tiny[0], root, "tiny-llama", {**RECIPES, **vec, "learned": {"scale_learned": str(learned)}})
    return {n: d for n, d in dirs.items() if n != "walls"}  # exact walls run eager


@pytest.fixture(scope="module")
def engine(tiny, recipe_dirs, vector_dirs):
    """A compiled engine (vLLM's torch.compile on the CPU build), prefix caching on, 40 tokens per step."""
    from geosteer_vllm import steered_llm
    from geosteer_vllm.inline import Policy

    llm = steered_llm(tiny[2], recipe_dirs, Policy(vector_dirs), **{
        **TINY_ENGINE, "enforce_eager": False, "max_num_seqs": 16, "max_num_batched_tokens": 40,
        "block_size": 32, "enable_prefix_caching": True})
    yield llm
    del llm
    gc.collect()


def test_every_residual_recipe_in_the_compiled_graph_matches_hf(tiny, recipe_dirs, vector_dirs, engine):
    from geosteer.recipe import InterventionSpec

    model, prompts, _ = tiny
    cfg = engine.llm_engine.vllm_config
    assert not cfg.model_config.enforce_eager and cfg.cache_config.enable_prefix_caching
    from geosteer_vllm import graph

    # the surfaces run in the graph where their shared-key kernels are built (make serve builds them)
    assert cfg.model_config.hf_config.geosteer_graph == graph.attention_in_graph()
    names = [None, *recipe_dirs, *INLINE]
    refs = {n: hf_reference(model, prompts, None if n is None else recipe_dirs[n], NEW) for n in names
            if n not in INLINE}
    for n, keys in INLINE.items():
        spec = InterventionSpec(**{**keys, "vectors": vector_dirs[keys["vectors"]]})
        refs[n] = hf_greedy(model, prompts, NEW, spec.build(model))
    for n in names:
        if n not in (None, "neutral"):
            assert changes(refs[n], refs[None]), f"recipe {n} does not change the HF reference"
    order = [(n, i) for i in range(len(prompts)) for n in names]
    got, got_lp = vllm_greedy(engine, [prompts[i] for _, i in order], NEW, [INLINE.get(n, n) for n, _ in order])
    results = {}
    for n in names:
        rows = [k for k, (m, _) in enumerate(order) if m == n]
        results[n] = agreement(refs[n][0], [got[k] for k in rows], refs[n][1], [got_lp[k] for k in rows])
    print(results)
    for n, (same, worst) in results.items():
        assert same == N_PROMPTS, f"{n}: {same}/{N_PROMPTS} prompts agree ({results})"
        assert worst < 1e-3, f"{n}: log-prob difference {worst} ({results})"


def test_an_inline_recipe_the_graph_cannot_hold_is_refused(engine, vector_dirs):
    from geosteer.errors import GeosteerError
    from geosteer_vllm import sampling

    with pytest.raises(GeosteerError, match="compiled graph: it has 2 edits at mlp_out"):
        sampling({"scale_site": "mlp_out", "scale_par": 0.5, "alpha_mlp": 1.2}, max_tokens=2)
    (ok,) = engine.generate([{"prompt_token_ids": [1, 2, 3]}], sampling(max_tokens=2), use_tqdm=False)
    assert len(ok.outputs[0].token_ids) == 2
