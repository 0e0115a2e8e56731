"""Recipes split over two tensor-parallel ranks: a tiny Llama on vLLM's CPU build with
``tensor_parallel_size=2`` (two worker processes, gloo and shared memory between them), against geosteer's
Hugging Face path (which the one-rank engines of ``test_quick.py`` and ``test_compiled.py`` also match).

Each rank runs two of the four query heads and one of the two KV heads; the surfaces, exact walls and
``value_full`` scaling keep their rank's heads (``serve.tensor_parallel``; over concatenated heads with its
dot products summed over the ranks; the walls' channels as wide on both ranks), the residual-space recipes
run whole on every rank. Two engines: the compiled one (vLLM's torch.compile, the steering from tables in
the graph) and the eager one with the walls and activation captures (written by rank 0 alone). Every recipe
kind, named and inline, 4 prompts x 8 greedy tokens interleaved in one ``generate`` call: each request must
get its own recipe's HF tokens, log-probs within 1e-3. In ``make serve-test`` (two engines of two processes
each: minutes on two cores).
"""

from __future__ import annotations

import gc

import pytest
import torch

pytest.importorskip("vllm")

from tests.serve.helpers import (  # noqa: E402
    TINY_ENGINE,
    agreement,
    changes,
    hf_greedy,
    hf_reference,
    prompt_ids,
    random_surfaces,
    random_vector_dirs,
    tiny_folder,
    tiny_recipe_dirs,
    vllm_greedy,
)

N_PROMPTS, NEW, TP = 4, 8, 2
MAX_CAPTURE = 20_000
RECIPES = {  # with the surfaces and the surfaces with exact walls (helpers.tiny_recipe_dirs): every kind
    "value": dict(scale_site="value_full", scale_par=0.3, scale_perp=1.5, scale_layers="1-2"),
    "value_concat": dict(scale_site="value_full", scale_par=0.2, scale_perp=1.4, scale_layers="0-1",
                         scale_value_space="concat"),
    "directional": dict(scale_site="attn_out", scale_par=1.6, scale_perp=0.6, scale_layers="0-1"),
    "dynamics": dict(mlp_variant="tangential", mlp_layers="1", alpha_mlp=1.4, gain_layers="2",
                     parallel_layers="0"),
    "block": dict(scale_site="resid_post", scale_par=1.3, scale_layers="1"),
    "ffn_out": dict(scale_site="mlp_out", scale_par=1.8, scale_perp=0.7, scale_layers="2"),
    "neutral": {},
}
VECTOR_LAYERS = {"resid_post": (0, 1, 2), "mlp_out": (0, 2)}
VECTOR_RECIPES = {
    "vec_add": dict(vectors="resid_post", vector_scale=3.0),
    "vec_norm_gen": dict(vectors="mlp_out", vector_mode="norm_match", vector_scale=4.0, vector_phase="generation"),
}
INLINE = {"inline_mix": {"vectors": "resid_post", "vector_scale": -2, "scale_site": "attn_out", "scale_par": 0.5}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from geosteer.models.loading import load_model

    folder = tiny_folder("llama", tmp_path_factory.mktemp("tiny-llama"))
    model, tok = load_model(folder)
    assert model.config.num_attention_heads % TP == 0 and model.config.num_key_value_heads % TP == 0
    return model, prompt_ids(tok, N_PROMPTS), folder


@pytest.fixture(scope="module")
def vector_dirs(tiny, tmp_path_factory):
    return random_vector_dirs(tiny[0], tmp_path_factory.mktemp("vectors"), VECTOR_LAYERS)


@pytest.fixture(scope="module")
def recipe_dirs(tiny, vector_dirs, tmp_path_factory):
    vec = {n: {**keys, "vectors": vector_dirs[keys["vectors"]]} for n, keys in VECTOR_RECIPES.items()}
    return tiny_recipe_dirs(tiny[0], tmp_path_factory.mktemp("recipes"), "tiny-llama", {**RECIPES, **vec})


@pytest.fixture(scope="module")
def refs(tiny, recipe_dirs, vector_dirs):
    """The HF path's greedy tokens and log-probs under every recipe (None: the stock model)."""
    from geosteer.recipe import InterventionSpec

    model, prompts, _ = tiny
    out = {n: hf_reference(model, prompts, None if n is None else recipe_dirs[n], NEW) for n in [None, *recipe_dirs]}
    for n, keys in INLINE.items():
        out[n] = hf_greedy(model, prompts, NEW, InterventionSpec(**{**keys, "vectors": vector_dirs[keys["vectors"]]})
                           .build(model))
    for n, ref in out.items():
        if n not in (None, "neutral"):
            assert changes(ref, out[None]), f"recipe {n} does not change the HF reference"
    unwalled = random_surfaces(model, recipe_dirs["walls"] + "-without", layers=(0,))
    assert changes(out["walls"], hf_reference(model, prompts, unwalled, NEW)), "the walls change nothing"
    return out


@pytest.fixture(scope="module", params=["compiled", "eager"])
def engine(request, tiny, recipe_dirs, vector_dirs):
    """Two ranks; compiled (the surfaces in the graph where geosteer's CPU kernels are built), or eager with
    the exact walls (their layer 0 takes the channel layout for the surfaces too) and activation captures.
    40 tokens per step: prefill chunks beside decoding tokens; prefix caching on."""
    from geosteer_vllm import steered_llm
    from geosteer_vllm.inline import Policy

    eager = request.param == "eager"
    extra = {"max_capture": MAX_CAPTURE} if eager else {}
    dirs = {n: d for n, d in recipe_dirs.items() if eager or n != "walls"}  # exact walls run eager
    with pytest.MonkeyPatch.context() as mp:  # vLLM's automatic thread binding wants a NUMA node per rank
        mp.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        llm = steered_llm(tiny[2], dirs, Policy(vector_dirs), tensor_parallel_size=TP, **extra, **{
            **TINY_ENGINE, "enforce_eager": eager, "max_num_seqs": 16, "max_num_batched_tokens": 40,
            "block_size": 32, "enable_prefix_caching": True})
    yield request.param, llm
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def test_every_splittable_recipe_over_two_ranks_matches_hf(tiny, recipe_dirs, refs, engine):
    from geosteer_vllm import graph

    kind, llm = engine
    cfg = llm.llm_engine.vllm_config
    assert cfg.parallel_config.tensor_parallel_size == TP and cfg.cache_config.enable_prefix_caching
    assert cfg.model_config.enforce_eager == (kind == "eager" or not graph.attention_in_graph())
    _, prompts, _ = tiny
    names = [None, *llm.llm_engine.vllm_config.model_config.hf_config.geosteer_recipes, *INLINE]
    assert ("walls" in names) == (kind == "eager")
    order = [(n, i) for i in range(len(prompts)) for n in names]  # interleaved: every batch is mixed
    got, got_lp = vllm_greedy(llm, [prompts[i] for _, i in order], NEW, [INLINE.get(n, n) for n, _ in order])
    results = {}
    for n in names:
        rows = [k for k, (m, _) in enumerate(order) if m == n]
        results[n] = agreement(refs[n][0], [got[k] for k in rows], refs[n][1], [got_lp[k] for k in rows])
    print(kind, results)
    for n, (same, worst) in results.items():
        assert same == N_PROMPTS, f"{kind} {n}: {same}/{N_PROMPTS} prompts agree ({results})"
        assert worst < 1e-3, f"{kind} {n}: log-prob difference {worst} ({results})"


def test_activations_read_over_two_ranks_are_written_once(tiny, recipe_dirs, engine):
    """Every rank holds the whole residual stream; rank 0 alone writes it: the capture file holds one row per
    layer and position (both ranks writing would double it), equal to the HF path's."""
    import numpy as np

    import geosteer
    from geosteer.hooks import attach_hooks
    from geosteer_vllm import activations, admission, capture, sampling
    from geosteer_vllm.plan import spec_of

    kind, llm = engine
    if kind != "eager":
        pytest.skip("captures run on the eager engine")
    model, prompts, _ = tiny
    cap = {"point": "resid_post", "layers": [1, 2], "positions": "all"}
    params = sampling("value", capture=cap, max_tokens=NEW, temperature=0.0, ignore_eos=True)
    (out,) = llm.generate([{"prompt_token_ids": prompts[0]}], params, use_tqdm=False)
    ids = prompts[0] + list(out.outputs[0].token_ids)[:-1]
    folder, _, width = admission.capture_config()
    written = np.fromfile(capture.path_of(folder, params.extra_args["geosteer_capture"]["token"]), np.float32)
    assert written.size == 2 * len(ids) * (width + 2)  # 2 layers x positions, each row (layer, position, values)
    got = activations(params, out)
    ref: dict[int, torch.Tensor] = {}
    with torch.no_grad(), geosteer.steer(model, *spec_of(recipe_dirs["value"])[0].build(model)):
        remove = attach_hooks(model, "resid_post", [1, 2], lambda t, ctx: ref.__setitem__(ctx.layer, t[0].clone()))
        try:
            model(torch.tensor([ids]))
        finally:
            remove()
    for layer in (1, 2):
        assert len(got[str(layer)]) == len(ids)
        torch.testing.assert_close(torch.tensor(got[str(layer)]), ref[layer], rtol=1e-4, atol=1e-4)
