"""Prefix caching under recipes, and chat completions, on a tiny Llama (vLLM CPU build, fp32) against the
Hugging Face path.

Prefix caching is on (blocks of 32 tokens, the CPU backend's smallest): a steered request's cached blocks
hold steered keys and values, so a stock request with the same prompt must not reuse them (each recipe's
blocks carry its own salt). The
test runs the steered requests first and the stock ones after, and checks the stock tokens against the HF
stock model; a control run with the salt switched off shows that the stock requests then do read the
steered blocks (so the check can fail). Chat: ``LLM.chat`` applies the tokenizer's chat template; the same
messages through ``apply_chat_template`` on the HF path must give the same greedy tokens, stock and steered
(a named recipe and an inline one).
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
    prompt_ids,
    tiny_folder,
    vllm_greedy,
)

NEW = 8
STEER = dict(scale_site="resid_post", scale_par=1.6, scale_perp=0.6, scale_layers="0")  # K/V of layers 1-2
MESSAGES = [[{"role": "user", "content": "Write one line about rivers."}],
            [{"role": "user", "content": "Name a colour."}]]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from geosteer.models.loading import load_model
    from geosteer.recipe import InterventionSpec, save_recipe
    from geosteer.serve import steered_llm
    from geosteer.serve.inline import Policy

    folder = tiny_folder("llama", tmp_path_factory.mktemp("tiny-llama"))
    model, tok = load_model(folder)
    steer = str(save_recipe(tmp_path_factory.mktemp("r") / "steer", InterventionSpec(**STEER), base_model="tiny-llama"))
    llm = steered_llm(folder, {"steer": steer}, Policy(),
                      **{**TINY_ENGINE, "max_model_len": 96, "block_size": 32, "enable_prefix_caching": True})
    yield llm, model, tok, steer
    del llm
    gc.collect()


def test_a_steered_prefix_never_reaches_a_stock_request(engine, monkeypatch):
    from geosteer.serve import admission
    from geosteer.serve.plan import spec_of

    llm, model, tok, steer = engine
    assert llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    prompts = prompt_ids(tok, 3, length=40)  # one full block of 32 tokens, then 8
    stock = hf_greedy(model, prompts, NEW)
    steered = hf_greedy(model, prompts, NEW, spec_of(steer)[0].build(model))
    assert changes(stock, steered)

    def run():
        llm.reset_prefix_cache()
        first = vllm_greedy(llm, prompts, NEW, ["steer"] * len(prompts))  # fills the cache with steered blocks
        return first, vllm_greedy(llm, prompts, NEW, [None] * len(prompts)), \
            vllm_greedy(llm, prompts, NEW, ["steer"] * len(prompts))

    first, after, again = run()
    for ref, got in ((steered, first), (stock, after), (steered, again)):
        same, worst = agreement(ref[0], got[0], ref[1], got[1])
        assert same == len(prompts) and worst < 1e-3, (same, worst)
    monkeypatch.setattr(admission, "salt", lambda plan, n, user: user)  # the control: no salt
    _, leaked, _ = run()
    assert changes(leaked, stock), "without the salt the stock requests should have read the steered blocks"


def test_chat_completions_follow_the_chat_template_stock_and_steered(engine):
    from geosteer.recipe import InterventionSpec
    from geosteer.serve import sampling
    from geosteer.serve.plan import spec_of

    llm, model, tok, steer = engine
    inline = {"scale_site": "attn_out", "scale_par": 0.4, "alpha_mlp": 1.3}
    cases = {None: (), "steer": spec_of(steer)[0].build(model), "inline": InterventionSpec(**inline).build(model)}
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
