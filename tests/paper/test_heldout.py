"""geosteer_paper.heldout: the comparison against one unpadded float64 forward per prompt with the sums and KLs
written out as loops; the shared options, prompt files and summary line."""

import argparse
import json

import pytest
import torch

from geosteer.directional.sites import ComponentScale
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer_paper.heldout import add_prompt_options, heldout_comparison, read_prompt_sets, summary_line
from geosteer_paper.stats import mean_ci

TARGETS = [{"prompt": "The capital of France is", "target": " Paris"},
           {"prompt": "Water boils at a temperature of", "target": " one hundred degrees"}]
NEGATIVES = [{"prompt": "The capital of France is", "target": " Rome"},
             {"prompt": "My favourite colour", "target": " is green"}]  # paired with the targets (margin)
CONTROLS = ["The weather today", "A short story about a cat who", "Numbers: one two"]


def _logp(model, tok, ivs, text_ids):
    with torch.no_grad(), steer(model, *ivs):
        logits = model(input_ids=torch.tensor([text_ids]), use_cache=False).logits[0]
    return torch.log_softmax(logits.double(), -1)


def _ids(tok, text):
    return tok(text, add_special_tokens=False).input_ids


def _naive(model, tok, ivs, items):
    """Σ log p(target token | everything before it), BOS first, one prompt at a time."""
    out = []
    for it in items:
        pre, cont = [tok.bos_token_id, *_ids(tok, it["prompt"])], _ids(tok, it["target"])
        lp = _logp(model, tok, ivs, pre + cont)
        out.append(sum(float(lp[len(pre) - 1 + j, c]) for j, c in enumerate(cont)))
    return torch.tensor(out, dtype=torch.float64)


def _naive_kl(model, tok, ref_ivs, ivs):
    """Per control prompt: KL(P_ref ‖ P) after its last token, and its mean over the prompt's positions."""
    nxt, every = [], []
    for p in CONTROLS:
        ids = [tok.bos_token_id, *_ids(tok, p)]
        a, b = _logp(model, tok, ref_ivs, ids), _logp(model, tok, ivs, ids)
        kl = [float((a[t].exp() * (a[t] - b[t])).sum()) for t in range(len(ids))]
        nxt.append(kl[-1])
        every.append(sum(kl) / len(kl))
    return torch.tensor(nxt), torch.tensor(every)


@pytest.mark.parametrize("reference", [[], [ComponentScale("attn_out", s_par=0.5)]], ids=["stock", "edited"])
def test_heldout_comparison_equals_per_prompt_loops(tiny_model, reference):
    model, tok = tiny_model("llama")
    steered = [ComponentScale("attn_out", s_par=0.0, s_perp=1.5)]
    got = heldout_comparison(model, tok, reference, steered, TARGETS, NEGATIVES, CONTROLS)
    for name, items, ivs in [("ref_target", TARGETS, reference), ("target", TARGETS, steered),
                             ("ref_negative", NEGATIVES, reference), ("negative", NEGATIVES, steered)]:
        torch.testing.assert_close(getattr(got, name).double(), _naive(model, tok, ivs, items), atol=1e-3, rtol=0)
    nxt, every = _naive_kl(model, tok, reference, steered)
    assert float(nxt.min()) > 1e-3  # the edit moves every control prompt's next token: the check can fail
    torch.testing.assert_close(got.kl_next.double(), nxt.double(), atol=1e-4, rtol=0)
    torch.testing.assert_close(got.kl_all.double(), every.double(), atol=1e-4, rtol=0)


def test_summary_rows_keep_their_keys_and_order(tiny_model):
    model, tok = tiny_model("llama")
    got = heldout_comparison(model, tok, [], [ComponentScale("attn_out", s_par=0.0)], TARGETS, NEGATIVES, CONTROLS)
    plain, margin = got.summary("stock"), got.summary("reference", margin=True)
    assert list(plain) == ["target_gain", "negative_drop", "control_kl_next", "control_kl_all",
                           "stock_target_logprob", "stock_negative_logprob"]
    assert list(margin) == ["target_gain", "negative_drop", "margin_gain", "control_kl_next", "control_kl_all",
                            "reference_target_logprob", "reference_negative_logprob"]
    margin_gain = (got.target - got.ref_target).mean() - (got.negative - got.ref_negative).mean()
    assert margin["margin_gain"]["mean"] == pytest.approx(float(margin_gain), abs=1e-5)
    assert margin["target_gain"] == mean_ci(got.target - got.ref_target)
    assert plain["stock_negative_logprob"] == pytest.approx(float(got.ref_negative.mean()))


def test_the_prompt_options_read_the_three_files(tmp_path):
    for name, doc in [("t.json", TARGETS), ("n.json", NEGATIVES), ("c.json", CONTROLS)]:
        (tmp_path / name).write_text(json.dumps(doc))
    ap = argparse.ArgumentParser()
    add_prompt_options(ap)
    a = ap.parse_args(["--target", str(tmp_path / "t.json"), "--negative", str(tmp_path / "n.json"),
                       "--controls", str(tmp_path / "c.json"), "--out", "o.json"])
    assert a.threads == 1 and a.out == "o.json"
    assert read_prompt_sets(a) == (TARGETS, NEGATIVES, CONTROLS)
    (tmp_path / "n.json").write_text(json.dumps([{"prompt": "x"}]))
    with pytest.raises(GeosteerError, match="item 0 must be an object with string 'prompt' and 'target'"):
        read_prompt_sets(a)


def test_summary_line_names_the_four_means():
    row = {"target_gain": {"mean": 1.23456}, "negative_drop": {"mean": -0.5}, "control_kl_next": {"mean": 0.012345},
           "control_kl_all": {"mean": 2e-5}}
    assert summary_line("out/a", row) == ("out/a: target gain 1.235 nats, negative drop -0.500, "
                                          "control KL next 0.0123, all 0.0000")
