"""The byte-level multiple-choice scorer against lm-eval's own definitions (HFLM window, process_results)."""

from types import SimpleNamespace

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer_paper.multiple_choice import (
    byte_encode,
    continuation_logprobs,
    mc_metrics,
    score_multiple_choice,
    segments,
)


def _byte_model(seed=0):
    from geosteer_paper.directional.pretrain import small_model

    return small_model(d_model=32, layers=2, heads=2, ffn=64, ctx=16, seed=seed).eval()


@torch.no_grad()
def _lm_eval_ll(model, ctx, cont, max_length):
    """lm-eval HFLM._loglikelihood_tokens for one request, written out: one unpadded forward."""
    inp = torch.tensor((ctx + cont)[-(max_length + 1):][:-1])
    logits = torch.log_softmax(model(input_ids=inp[None]).logits[0].double(), -1)
    contlen, inplen = len(cont), len(inp)
    logits = logits[inplen - contlen:inplen]
    return float(logits[torch.arange(contlen), torch.tensor(cont)].sum())


def test_loglikelihood_equals_lm_eval_window_rule():
    m = _byte_model()
    reqs = [(byte_encode("The cat sat on the"), byte_encode(" mat")),  # context truncated on the left
            (byte_encode("Hi"), byte_encode(" there")),  # fits whole
            (byte_encode("abc"), byte_encode(" " + "x" * 15))]  # continuation = window
    got = continuation_logprobs(m, reqs, window=16, batch_size=2)  # batched, right-padded
    for (ctx, cont), g in zip(reqs, got, strict=True):
        assert g == pytest.approx(_lm_eval_ll(m, ctx, cont, 16), abs=1e-4)


def test_long_continuations_are_scored_in_blocks_with_enough_history():
    m = _byte_model(1)
    ctx, cont = byte_encode("context here"), byte_encode(" a continuation longer than the window")
    W = 16
    segs = segments(len(ctx) + len(cont), len(cont), W)
    covered = [p for _, a, b in segs for p in range(a, b)]
    assert covered == list(range(len(ctx), len(ctx) + len(cont)))  # every target exactly once
    for st, a, b in segs:
        assert b - 1 - st <= W and a - st >= W // 2  # input ≤ W tokens; each target sees ≥ W/2
    # naive: each target from its own forward over exactly the block's history up to it
    full = ctx + cont
    ref = 0.0
    for st, a, b in segs:
        for p in range(a, b):
            lp = torch.log_softmax(m(input_ids=torch.tensor([full[st:p]])).logits[0, -1].double(), -1)
            ref += float(lp[full[p]])
    assert continuation_logprobs(m, [(ctx, cont)], window=W)[0] == pytest.approx(ref, abs=1e-4)


def _lm_eval_process_results(doc, lls):
    """lm-eval's ConfigurableTask.process_results (multiple_choice branch) on a stand-in task object."""
    from lm_eval.api.task import ConfigurableTask

    fake = SimpleNamespace(config=SimpleNamespace(process_results=None), OUTPUT_TYPE="multiple_choice",
                           _metric_fn_list={"acc": None, "acc_norm": None}, multiple_input=False,
                           multiple_target=False, doc_to_choice=lambda d: d["choices"],
                           doc_to_target=lambda d: d["answer"])
    return ConfigurableTask.process_results(fake, doc, [(ll, False) for ll in lls])


@pytest.mark.parametrize("lls,gold", [
    ([-4.0, -6.0, -9.0, -7.0], 0),  # acc picks idx 0; per character (3, 3, 5, 6) idx 3 wins acc_norm
    ([-4.0, -6.0, -9.0, -7.0], 3),
    ([-5.0, -5.0, -30.0, -30.0], 1),  # tie on acc and acc_norm: the first index wins
    ([-3.0, -3.0, -12.0, -3.0], 0),  # acc tie of 0, 1, 3 -> 0; acc_norm -> 3 (longest)
])
def test_acc_and_acc_norm_match_lm_eval(lls, gold):
    doc = {"choices": ["cat", "dog", "horse", "longer"], "answer": gold}
    ours = mc_metrics(lls, doc["choices"], gold)
    ref = _lm_eval_process_results(doc, lls)
    assert ours == {"acc": ref["acc"], "acc_norm": ref["acc_norm"]}


def test_score_and_stderr_match_lm_eval_aggregation():
    from lm_eval.api.metrics import mean_stderr

    m = _byte_model(2)
    docs = [{"context": f"Item {i}: the answer is", "choices": ["a", "bb", "ccc", "dddd"], "answer": i % 4}
            for i in range(9)]
    got = score_multiple_choice(m, docs, window=16, batch_size=5)
    accs, norms = [], []
    for d in docs:
        lls = [_lm_eval_ll(m, byte_encode(d["context"]), byte_encode(" " + c), 16) for c in d["choices"]]
        r = _lm_eval_process_results(d, lls)
        accs.append(r["acc"])
        norms.append(r["acc_norm"])
    assert got["n"] == 9
    assert got["acc"] == pytest.approx(sum(accs) / 9) and got["acc_norm"] == pytest.approx(sum(norms) / 9)
    assert got["acc_stderr"] == pytest.approx(mean_stderr(accs))
    assert got["acc_norm_stderr"] == pytest.approx(mean_stderr(norms))


def test_bad_input():
    m = _byte_model()
    with pytest.raises(GeosteerError):
        continuation_logprobs(m, [([], byte_encode(" x"))], window=16)
    with pytest.raises(GeosteerError):
        score_multiple_choice(m, [], window=16)
