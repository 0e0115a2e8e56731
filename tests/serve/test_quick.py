"""The CI-sized serving check: a tiny Llama on vLLM (CPU build, fp32) against geosteer's Hugging Face path.

One engine serves every recipe kind (surfaces, surfaces with exact walls, directional at a residual site and
in value space, learned per-layer scales, dynamics, a block-output edit, steering vectors at each hook point
in every mode and phase, a neutral recipe), two inline recipes (objects of recipe keys) and the stock model; 4
prompts x 8 greedy tokens under each, all interleaved in one ``generate`` call, then a stock batch and a
surfaces batch alone. Each request must get its own recipe's HF tokens, with next-token log-probs within 1e-3
where both agree, and every non-neutral recipe must change the HF reference (so a recipe that is silently
dropped fails; the walls also change their surfaces' reference). The same engine (prefix caching on) then
checks that a steered prefix never reaches a stock request, and chat completions through the tokenizer's chat
template.
The full check on the default model is ``test_parity.py``, the other families ``test_models.py``.
"""

from __future__ import annotations

import gc

import pytest
import torch

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
    random_vector_dirs,
    tiny_folder,
    tiny_recipe_dirs,
    vllm_greedy,
)

N_PROMPTS, NEW = 4, 8
MAX_CAPTURE = 20_000  # values per request: 2 layers x 24 tokens x 128 fit, 3 layers x (16 + 40) x 128 do not
MESSAGES = [[{"role": "user", "content": "Write one line about rivers."}],
            [{"role": "user", "content": "Name a colour."}]]
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
    return random_vector_dirs(tiny[0], tmp_path_factory.mktemp("vectors"), VECTOR_LAYERS)


@pytest.fixture(scope="module")
def recipe_dirs(tiny, vector_dirs, tmp_path_factory):
    from geosteer.directional.learned import LearnedScales
    from geosteer.directional.scales_artifact import save_scales

    vec = {n: {**keys, "vectors": vector_dirs[keys["vectors"]]} for n, keys in VECTOR_RECIPES.items()}
    root = tmp_path_factory.mktemp("recipes")
    learned = save_scales(LearnedScales("mlp_out", [0, 2], [1.6, 0.5], [0.7, 1.4]), root / "scales",
                          base_model="tiny-llama")  # per-layer learned s_par / s_perp
    return tiny_recipe_dirs(tiny[0], root, "tiny-llama",
                            {**RECIPES, **vec, "learned": {"scale_learned": str(learned)}})


@pytest.fixture(scope="module")
def engine(tiny, recipe_dirs, vector_dirs):
    """One engine for the module: every recipe, inline recipes on the vectors, prefix caching on (blocks of 32
    tokens, the CPU backend's smallest). 40 tokens and 16 requests per step: prompts are prefilled in chunks
    while earlier requests decode (mixed batches); the surfaces' layer 0 takes the channel layout (another
    recipe has walls there), layer 2 the shared keys."""
    from geosteer_vllm import steered_llm
    from geosteer_vllm.inline import Policy

    llm = steered_llm(tiny[2], recipe_dirs, Policy(vector_dirs), max_capture=MAX_CAPTURE, **{
        **TINY_ENGINE, "max_num_seqs": 16, "max_num_batched_tokens": 40, "block_size": 32,
        "enable_prefix_caching": True})
    yield llm
    del llm
    gc.collect()


def test_every_recipe_kind_in_one_mixed_batch_matches_hf(tiny, recipe_dirs, vector_dirs, engine):
    from geosteer.recipe import InterventionSpec

    model, prompts, _ = tiny
    llm = engine
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
    order = [(n, i) for i in range(len(prompts)) for n in names]  # interleaved: every batch is mixed
    got, got_lp = vllm_greedy(llm, [prompts[i] for _, i in order], NEW, [INLINE.get(n, n) for n, _ in order])
    # batches of one kind: stock requests skip the key features, surfaces requests fill every row
    alone = {n: vllm_greedy(llm, prompts, NEW, [n] * len(prompts)) for n in (None, "surfaces")}
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


def test_a_steered_prefix_never_reaches_a_stock_request(tiny, recipe_dirs, engine, monkeypatch):
    """Steered requests first, then stock ones with the same prompts: the stock tokens must be the HF stock
    model's. A control run with the cache salt switched off shows the stock requests then do read the
    steered blocks (so this check can fail)."""
    from geosteer.models.loading import load_model
    from geosteer_vllm import admission
    from geosteer_vllm.plan import spec_of

    llm, model, steer = engine, tiny[0], recipe_dirs["vec_add"]  # resid_post on every layer: K/V of layers 1-2
    assert llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    prompts = prompt_ids(load_model(tiny[2])[1], 3, length=40)  # one full block of 32 tokens, then 8
    stock = hf_greedy(model, prompts, NEW)
    steered = hf_greedy(model, prompts, NEW, spec_of(steer)[0].build(model))
    assert changes(stock, steered)

    def run():
        llm.reset_prefix_cache()
        first = vllm_greedy(llm, prompts, NEW, ["vec_add"] * len(prompts))  # fills the cache: steered blocks
        return first, vllm_greedy(llm, prompts, NEW, [None] * len(prompts)), \
            vllm_greedy(llm, prompts, NEW, ["vec_add"] * len(prompts))

    first, after, again = run()
    for ref, got in ((steered, first), (stock, after), (steered, again)):
        same, worst = agreement(ref[0], got[0], ref[1], got[1])
        assert same == len(prompts) and worst < 1e-3, (same, worst)
    monkeypatch.setattr(admission, "salt", lambda plan, n, user: user)  # the control: no salt
    _, leaked, _ = run()
    assert changes(leaked, stock), "without the salt the stock requests should have read the steered blocks"


def test_chat_completions_follow_the_chat_template_stock_and_steered(tiny, recipe_dirs, engine):
    """``LLM.chat`` applies the tokenizer's chat template; the same messages through ``apply_chat_template`` on
    the HF path give the same ids and greedy tokens, stock and steered (a named recipe and an inline one)."""
    from geosteer.models.loading import load_model
    from geosteer.recipe import InterventionSpec
    from geosteer_vllm import sampling
    from geosteer_vllm.plan import spec_of

    llm, model, tok = engine, tiny[0], load_model(tiny[2])[1]
    inline = {"scale_site": "attn_out", "scale_par": 0.4, "alpha_mlp": 1.3}
    steer = recipe_dirs["directional"]
    cases = {None: (), "directional": spec_of(steer)[0].build(model),
             "inline": InterventionSpec(**inline).build(model)}
    ids = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True) for m in MESSAGES]
    ids = [list(x["input_ids"] if hasattr(x, "keys") else x) for x in ids]  # a BatchEncoding or the ids
    results = {}
    for name, interventions in cases.items():
        refs = [hf_greedy(model, [p], NEW, interventions) for p in ids]  # prompts of different lengths
        recipe = inline if name == "inline" else name
        outs = llm.chat(MESSAGES, sampling(recipe, max_tokens=NEW, temperature=0.0, logprobs=0, ignore_eos=True),
                        use_tqdm=False)
        assert [list(o.prompt_token_ids) for o in outs] == ids  # the same template, the same ids
        for (rt, rl), o in zip(refs, outs, strict=True):
            toks = list(o.outputs[0].token_ids)
            lps = [lp[t].logprob for lp, t in zip(o.outputs[0].logprobs, toks, strict=True)]
            results.setdefault(name, []).append(agreement(rt, [toks], rl, [lps]))
    print(results)
    for name, res in results.items():
        assert all(same == 1 and worst < 1e-3 for same, worst in res), (name, res)


def _hf_points(model, ids: list[int], point: str, layers: list[int], interventions) -> dict[int, torch.Tensor]:
    """The HF model's activations at ``point`` of ``layers`` over ``ids`` in one forward, after the recipe's
    edits (plain hooks attached after the recipe's)."""
    import geosteer
    from geosteer.hooks import attach_hooks

    out: dict[int, torch.Tensor] = {}

    def keep(t, ctx):
        out[ctx.layer] = t[0].detach().clone()

    with torch.no_grad(), geosteer.steer(model, *interventions):
        remove = attach_hooks(model, point, layers, keep)
        try:
            model(torch.tensor([ids]))
        finally:
            remove()
    return out


def test_activations_read_from_the_engine_equal_the_hf_path(tiny, recipe_dirs, engine):
    from geosteer_vllm import activations, sampling
    from geosteer_vllm.plan import spec_of

    model, prompts, _ = tiny
    cases = ((None, "resid_post", "prompt", [0, 2]), ("vec_add", "resid_post", "all", [1, 2]),
             ("directional", "attn_out", "all", [0, 1]), ("dynamics", "mlp_in", "prompt", [0]))
    for recipe, point, positions, layers in cases:
        inter = [] if recipe is None else spec_of(recipe_dirs[recipe])[0].build(model)
        params = [sampling(recipe, capture={"point": point, "layers": layers, "positions": positions},
                           max_tokens=NEW, temperature=0.0, ignore_eos=True) for _ in prompts[:2]]
        outs = engine.generate([{"prompt_token_ids": p} for p in prompts[:2]], params, use_tqdm=False)
        for p, prm, o in zip(prompts[:2], params, outs, strict=True):
            got = activations(prm, o)
            ids = p + (list(o.outputs[0].token_ids)[:-1] if positions == "all" else [])
            ref = _hf_points(model, ids, point, layers, inter)
            assert sorted(got) == [str(x) for x in layers]
            for layer in layers:
                torch.testing.assert_close(torch.tensor(got[str(layer)]), ref[layer], rtol=1e-4, atol=1e-4)


def test_captures_past_the_limit_or_forged_are_refused_and_the_engine_goes_on(tiny, engine):
    from vllm.exceptions import VLLMValidationError

    from geosteer_vllm import sampling

    _, prompts, _ = tiny
    big = sampling(capture={"point": "resid_post", "layers": [0, 1, 2], "positions": "all"}, max_tokens=40)
    with pytest.raises(VLLMValidationError, match="over this server's limit of 20000"):
        engine.generate([{"prompt_token_ids": prompts[0]}], big, use_tqdm=False)
    forged = sampling(max_tokens=2, extra_args={"geosteer_capture": {"point": "resid_post", "layers": [0],
                                                                     "positions": "all", "token": "0" * 32}})
    with pytest.raises(VLLMValidationError, match="the server issues its token"):
        engine.generate([{"prompt_token_ids": prompts[0]}], forged, use_tqdm=False)
    unknown = sampling(max_tokens=2, extra_args={"geosteer_recipe": "nope"})
    with pytest.raises(VLLMValidationError, match="unknown recipe 'nope'"):
        engine.generate([{"prompt_token_ids": prompts[0]}], unknown, use_tqdm=False)
    (ok,) = engine.generate([{"prompt_token_ids": prompts[0]}], sampling(max_tokens=2), use_tqdm=False)
    assert len(ok.outputs[0].token_ids) == 2
