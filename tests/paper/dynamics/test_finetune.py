"""Fine-tuning baselines beside the FFN gates: the bias module against a plain hook on the FFN output, the
rows' losses against cross-entropy computed by hand, parameter counts against hand counts, and LoRA removed
from the model afterwards."""

import pytest
import torch
import torch.nn.functional as F

from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer_paper.dynamics.finetune import FFNBias, finetune_rows
from tests.conftest import random_ids


def _nll(model, ids, add=None):
    hs = []
    if add is not None:
        for i, layer in enumerate(model.model.layers):
            hs.append(layer.mlp.register_forward_hook(lambda m, a, out, i=i: out + add[i]))
    try:
        with torch.no_grad():
            logits = model(ids).logits[:, :-1].float()
    finally:
        for h in hs:
            h.remove()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).item()


def test_bias_adds_to_the_ffn_output_and_zero_is_stock(tiny_model):
    model, _ = tiny_model("llama")
    ids = random_ids(2, 10, seed=3)
    b = FFNBias.for_model(model)
    with torch.no_grad(), steer(model, b):
        zero = model(ids).logits
    assert torch.equal(zero, model(ids).logits)
    with torch.no_grad():
        b.bias.normal_(generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), steer(model, b):
        got = model(ids).logits[:, :-1].float()
    ref = _nll(model, ids, b.bias.detach())
    got_nll = F.cross_entropy(got.reshape(-1, got.shape[-1]), ids[:, 1:].reshape(-1)).item()
    assert got_nll == pytest.approx(ref, rel=1e-5)


def test_rows_losses_and_counts_match_hand_computation(tiny_model):
    pytest.importorskip("peft")
    model, tok = tiny_model("llama")
    held = random_ids(2, 12, seed=5)
    flags = [p.requires_grad for p in model.parameters()]
    n_layers, d = len(model.model.layers), model.config.hidden_size
    ff = model.config.intermediate_size
    rows = finetune_rows(model, tok, held, ["gates", "bias", "lora"], {"gates": 0.02, "bias": 3e-3, "lora": 3e-3},
                         {"tokens": 128, "batch_size": 2, "seq_len": 16, "seed": 0}, lora_rank=2, batch_size=2)
    by = {r["method"]: r for r in rows}
    assert by["stock"]["loss"] == pytest.approx(_nll(model, held), rel=1e-5)
    assert by["gates"]["params"] == n_layers and by["bias"]["params"] == n_layers * d
    assert by["lora"]["params"] == n_layers * 2 * (ff + d)
    for m in ("gates", "bias", "lora"):
        assert by[m]["delta_loss"] == pytest.approx(by[m]["loss"] - by["stock"]["loss"], abs=1e-12)
        assert by[m]["train_tokens"] == 128
    assert not any("lora" in n for n, _ in model.named_parameters())  # unloaded: the model is stock again
    assert [p.requires_grad for p in model.parameters()] == flags
    assert _nll(model, held) == pytest.approx(by["stock"]["loss"], rel=1e-6)
    with pytest.raises(GeosteerError, match="unknown method"):
        finetune_rows(model, tok, held, ["full"], {}, {})


@pytest.mark.parametrize("args, needle", [
    (("--methods", "gates,full"), "unknown method (--methods) 'full'"),
    (("--gate-lr", "nan"), "--gate-lr must be a finite number"),
    (("--train-seq", "100000"), "--train-seq"),
])
def test_study_refuses_bad_input_before_the_model_loads(monkeypatch, capsys, tmp_path, args, needle):
    from tests.cli_helpers import refused_before_load

    monkeypatch.chdir(tmp_path)
    cmd = ("study", "dynamics", "finetune-baselines", "-m", "tiny-llama")
    assert needle in refused_before_load(monkeypatch, capsys, *cmd, *args, "--out", "r.json")
    assert list(tmp_path.iterdir()) == []
