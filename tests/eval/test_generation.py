"""Draft-verified greedy decoding equals plain greedy `model.generate`, whatever the draft."""

import pytest
import torch

import geosteer.manifold as M
from geosteer.eval.generation import greedy_with_draft, prompt_ids


def _reference(model, ids, n):
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         temperature=None, top_p=None, top_k=None, use_cache=True, output_logits=True,
                         return_dict_in_generate=True)
    return out.sequences[0, ids.shape[1]:].tolist(), out.logits[0][0]


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3"])
def test_any_draft_gives_the_greedy_tokens(tiny_model, family):
    model, tok = tiny_model(family)
    ids = prompt_ids(tok, "The river flows past the old mill and")
    n = 12
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))  # surfaces on: the feature cache is cropped too
    try:
        with torch.no_grad():
            bank.coefficients.copy_(torch.randn(bank.coefficients.shape,
                                                generator=torch.Generator().manual_seed(0)) * 0.3)
        ref, ref_first = _reference(model, ids, n)
        wrong = [(t + 1) % 100 for t in ref]
        drafts = {"none": None, "exact": ref, "prefix4": ref[:4] + wrong[4:], "wrong": wrong,
                  "long": ref + ref, "short": ref[:2]}
        for name, draft in drafts.items():
            got, first = greedy_with_draft(model, tok, ids, n, draft)
            assert got == ref, name
            torch.testing.assert_close(first, ref_first, rtol=1e-4, atol=1e-4)
    finally:
        M.uninstall(model)


def test_stops_after_eos_like_generate(tiny_model):
    model, tok = tiny_model("llama")
    ids = prompt_ids(tok, "Once upon a time")
    ref, _ = _reference(model, ids, 8)
    eos = ref[2]  # pretend the third greedy token is EOS: generate stops right after it
    old = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = eos
    try:
        ref_eos, _ = _reference(model, ids, 8)
        assert ref_eos[-1] == eos and len(ref_eos) <= 3
        for draft in (None, ref, ref[:1]):
            assert greedy_with_draft(model, tok, ids, 8, draft)[0] == ref_eos
    finally:
        model.generation_config.eos_token_id = old


def _naive_seeded(model, tok, prompt, seed, n, temperature, top_k):
    """Independent reference: no cache, batch 1, full forward per step, the same draw rule."""
    ids = prompt_ids(tok, prompt)
    g = torch.Generator().manual_seed(seed)
    out = []
    with torch.no_grad():
        for _ in range(n):
            z = model(input_ids=ids).logits[0, -1].float() / temperature
            kth = torch.topk(z, top_k).values[-1]
            z = z.masked_fill(z < kth, float("-inf"))
            t = int(torch.multinomial(torch.softmax(z, -1), 1, generator=g))
            out.append(t)
            ids = torch.cat([ids, torch.tensor([[t]])], 1)
    return out


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_batched_seeds_equal_one_seed_at_a_time_without_cache(tiny_model, family):
    from geosteer.eval.generation import generate_seeds

    model, tok = tiny_model(family)
    seeds = [0, 1, 2, 7]
    got = generate_seeds(model, tok, "Once upon a time", seeds, 10, temperature=1.3, top_k=20)
    assert [r.seed for r in got] == seeds and len({tuple(r.token_ids) for r in got}) > 1
    for r in got:
        assert r.token_ids == _naive_seeded(model, tok, "Once upon a time", r.seed, 10, 1.3, 20)
    alone = generate_seeds(model, tok, "Once upon a time", [7], 10, temperature=1.3, top_k=20)
    assert alone[0].token_ids == got[-1].token_ids


def test_draft_greedy_is_capped_at_the_context(tiny_model):
    """Asking past the model's positions gives exactly what fits (a GenerationCapped warning), the same tokens
    as plain greedy decoding of that many; a prompt that fills the context is a one-line error."""
    from geosteer.errors import GeosteerError
    from geosteer.eval.generation import GenerationCapped

    model, tok = tiny_model("llama")
    limit = model.config.max_position_embeddings
    ids = torch.randint(5, 100, (1, limit - 3), generator=torch.Generator().manual_seed(0))
    with pytest.warns(GenerationCapped, match="capped at 3"):
        got, _ = greedy_with_draft(model, tok, ids, 50)
    ref, _ = _reference(model, ids, 3)
    assert len(got) <= 3 and got == ref[:len(got)]
    with pytest.raises(GeosteerError, match="fills the model's context"):
        greedy_with_draft(model, tok, torch.randint(5, 100, (1, limit)), 5)
    with pytest.raises(GeosteerError, match="max_new_tokens must be >= 1"):
        greedy_with_draft(model, tok, ids, 0)
