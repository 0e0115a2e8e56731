import math

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.eval.perplexity import encode, strided_perplexity, window_spans

TEXT = " ".join(["The river flows past the old mill and the village square."] * 30)


def hf_reference(model, ids, context, stride):
    """The HF docs recipe, one window at a time, written independently (loss from labels)."""
    seq_len = ids.size(1)
    nll_sum, n_tokens, prev_end = 0.0, 0, 0
    for begin in range(0, seq_len, stride):
        end = min(begin + context, seq_len)
        trg_len = end - prev_end
        input_ids = ids[:, begin:end]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            loss = model(input_ids, labels=target_ids).loss
        num_valid = (target_ids != -100).sum().item() - 1 if begin == 0 else (target_ids != -100).sum().item()
        # HF shifts labels: the first position's label is never scored
        num_loss_tokens = (target_ids[:, 1:] != -100).sum().item()
        nll_sum += loss.item() * num_loss_tokens
        n_tokens += num_loss_tokens
        assert num_valid >= 0
        prev_end = end
        if end == seq_len:
            break
    return math.exp(nll_sum / n_tokens), n_tokens


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("context,stride", [(64, 32), (48, 48), (64, 17)])
def test_matches_independent_hf_loop(tiny_model, family, context, stride):
    model, tok = tiny_model(family)
    ids = encode(tok, TEXT)[None]
    ref_ppl, ref_n = hf_reference(model, ids, context, stride)
    res = strided_perplexity(model, tok, TEXT, context=context, stride=stride, batch_size=3)
    assert res.tokens == ref_n
    if context > stride:  # with overlap every token after the first is scored exactly once
        assert res.tokens == ids.shape[1] - 1
    assert abs(res.ppl - ref_ppl) / ref_ppl < 1e-4


def test_batching_does_not_change_result(tiny_model):
    model, tok = tiny_model("qwen2")
    a = strided_perplexity(model, tok, TEXT, context=64, stride=32, batch_size=1)
    b = strided_perplexity(model, tok, TEXT, context=64, stride=32, batch_size=8)
    assert abs(a.nll - b.nll) < 1e-5 and a.tokens == b.tokens


def test_bits_per_byte_consistent(tiny_model):
    model, tok = tiny_model("llama")
    r = strided_perplexity(model, tok, TEXT, context=64, stride=32)
    n_bytes = len(tok.decode(encode(tok, TEXT)[1:], skip_special_tokens=True).encode())
    assert r.bits_per_byte == pytest.approx(r.nll * r.tokens / math.log(2) / n_bytes)


def test_window_spans_score_every_token_once():
    for n, c, s in [(100, 32, 16), (7, 8, 4), (257, 64, 64), (300, 50, 7)]:
        spans = window_spans(n, c, s)
        assert sum(t for _, _, t in spans) == n
        assert spans[-1][1] == n and all(e - b <= c for b, e, _ in spans)


@pytest.mark.parametrize("kwargs,match", [
    (dict(context=16, stride=32), "must be >= stride"),
    (dict(context=32, stride=0), "stride must be > 0"),
])
def test_bad_window_arguments(tiny_model, kwargs, match):
    model, tok = tiny_model("llama")
    with pytest.raises(GeosteerError, match=match):
        strided_perplexity(model, tok, TEXT, **kwargs)


def test_short_and_empty_text(tiny_model):
    model, tok = tiny_model("llama")
    with pytest.raises(GeosteerError, match="shorter than one window"):
        strided_perplexity(model, tok, "Hello there.", context=64, stride=32, require_full_window=True)
    with pytest.raises(GeosteerError, match="empty"):
        strided_perplexity(model, tok, "   ", context=64, stride=32)


def test_heldout_ids_are_the_encoded_start_of_the_heldout_split(tiny_model):
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import encode, heldout_ids

    _, tok = tiny_model("llama")
    ids = heldout_ids(tok, 40)
    full = encode(tok, split_text("heldout", max_chars=4000))
    assert ids.shape == (40,) and torch.equal(ids, full[:40])
    # the tokenizer's own convention: SmolLM2's tokenizer puts no BOS first
    assert ids.tolist() == tok(split_text("heldout", max_chars=4000))["input_ids"][:40]


@pytest.mark.parametrize("family", ["gpt2", "llama"])  # learned positions (IndexError before) and RoPE (silent)
def test_windows_longer_than_the_model_positions_are_refused(tiny_model, family):
    model, tok = tiny_model(family)
    limit = model.config.max_position_embeddings if family != "gpt2" else model.config.n_positions
    ids = torch.randint(0, 1000, (limit + 40,))
    with pytest.raises(GeosteerError, match=rf"context {limit + 1} is longer than the model's {limit} positions"):
        strided_perplexity(model, tok, ids=ids, context=limit + 1, stride=64)
    res = strided_perplexity(model, tok, ids=ids, context=limit, stride=limit)  # exactly the positions: scored
    assert res.windows == 2 and math.isfinite(res.ppl)
    short = strided_perplexity(model, tok, ids=ids[:100], context=4 * limit, stride=64)  # windows cut to the text
    assert short.windows == 1
