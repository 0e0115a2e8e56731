"""Data-parallel training on CPU: 2 processes (gloo, via accelerate) equal 1 process at the same global batch,
with the base model replicated (DDP-style) and with it sharded by FSDP2 (``TrainConfig(fsdp=True)``).

Trains attention-manifold surfaces on a tiny Llama with the shared loop (``geosteer.train.train``). The
2-process run also splits each process' share into micro-batches (gradient accumulation). The same
processes then run sharded evaluation (``geosteer.integrations.distributed``): perplexity with the
windows spread over the processes, and a prompt list sharded and gathered back in order. The worker is
this module run as ``python -m tests.integrations.test_distributed RANK WORLD PORT OUT``: each process is a plain
``accelerate`` multi-CPU process, set up by environment variables exactly as ``accelerate launch
--cpu --num_processes 2`` sets them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
STEPS, BATCH, SEQ, LR = 4, 4, 24, 5e-2


def _setup(seed: int = 0):
    """tiny-llama's shape with a 512-token vocabulary (no tokenizer needed: the windows are given)."""
    from transformers import AutoModelForCausalLM

    import geosteer.manifold as M
    from geosteer.attention import use_geosteer_attention
    from geosteer.models.tiny import tiny_config

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config("llama", vocab_size=512))
    model.eval().requires_grad_(False)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)  # as the tiny models do: non-uniform attention
    use_geosteer_attention(model)
    bank = M.install(model, grid_size=4, grid_range=(-6.0, 6.0))
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 512, (4 * BATCH, SEQ + 1), generator=g)  # ready windows, 4 steps' worth
    return model, bank, ids


def _train(batch: int, micro_batch: int | None, accelerator=None, fsdp: bool = False, model_out: list | None = None
           ) -> tuple[torch.Tensor, list[float]]:
    from geosteer.train import TrainConfig, train

    model, bank, ids = _setup()
    cfg = TrainConfig(lr=LR, steps=STEPS, batch_size=batch, micro_batch=micro_batch, seq_len=SEQ,
                      warmup_steps=1, eval_before_after=False, checkpoint_every=0, grad_clip=None, seed=3,
                      fsdp=fsdp)
    res = train(model, bank, cfg, train_ids=ids, progress=False, log=None, accelerator=accelerator)
    if model_out is not None:
        model_out.append(model)
    return bank.coefficients.detach().cpu().clone(), [h["loss"] for h in res.history]


def _worker(rank: int, world: int, port: int, out: str) -> None:
    from accelerate import Accelerator

    torch.set_num_threads(1)
    acc = Accelerator(cpu=True)
    assert acc.num_processes == world and acc.process_index == rank, (acc.num_processes, acc.process_index)
    coef, losses = _train(BATCH, micro_batch=1, accelerator=acc)
    # the same run with the frozen base model sharded over the processes (FSDP2)
    held: list = []
    fsdp_coef, fsdp_losses = _train(BATCH, micro_batch=None, accelerator=acc, fsdp=True, model_out=held)
    w = held[0].model.layers[0].mlp.up_proj.weight
    fsdp_shard = [int(w.to_local().numel()), int(w.numel())]  # this process' share, the full size
    from geosteer.integrations.distributed import gather_records, shard, sharded_perplexity

    model, _, _ = _setup()
    ppl = sharded_perplexity(model, _tok(), ids=_ppl_ids(), context=64, stride=24, batch_size=2,
                             accelerator=acc)
    mine = shard(PROMPTS, acc)
    records = gather_records([{"prompt": p, "rank": rank} for p in mine], acc)
    if acc.is_main_process:
        torch.save({"coef": coef, "losses": losses, "ppl": ppl.to_dict(), "records": records,
                    "mine": mine, "fsdp_coef": fsdp_coef, "fsdp_losses": fsdp_losses,
                    "fsdp_shard": fsdp_shard}, out)
    acc.wait_for_everyone()


PROMPTS = [f"prompt {i}" for i in range(7)]


def _tok():
    from geosteer.models.loading import smollm2_tokenizer

    return smollm2_tokenizer()


def _ppl_ids() -> torch.Tensor:
    return torch.randint(0, 512, (200,), generator=torch.Generator().manual_seed(11))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world: int, out: Path) -> None:
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
               "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true", "PYTHONPATH": str(ROOT)}
        module = "tests.integrations.test_distributed"
        procs.append(subprocess.Popen([sys.executable, "-m", module, str(rank), str(world),
                                       str(port), str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode]
    assert not bad, f"workers failed {bad}:\n" + "\n".join(log[-3000:] for log in logs)


def test_two_gloo_processes_equal_one_process(tmp_path):
    from accelerate import Accelerator

    out = tmp_path / "ddp.pt"
    _launch(2, out)
    ddp = torch.load(out)
    one_coef, one_losses = _train(BATCH, micro_batch=None, accelerator=Accelerator(cpu=True))
    moved = (one_coef.abs().max()).item()  # started from zeros
    assert moved > 1e-3, "training did not move the surfaces; the comparison would be empty"
    torch.testing.assert_close(torch.tensor(ddp["losses"]), torch.tensor(one_losses), rtol=1e-5, atol=1e-6)
    diff = (ddp["coef"] - one_coef).abs().max().item()
    assert diff <= 1e-4 * moved, f"2-process result differs by {diff:.3g} (parameters moved {moved:.3g})"
    # control: a different global batch gives a clearly different result, so the tolerance discriminates
    half_coef, _ = _train(BATCH // 2, micro_batch=None, accelerator=Accelerator(cpu=True))
    assert (half_coef - one_coef).abs().max().item() > 100 * max(diff, 1e-7)

    # FSDP2: each process held half of the frozen weights, and training gave the one-process result
    local, full = ddp["fsdp_shard"]
    assert local * 2 == full
    torch.testing.assert_close(torch.tensor(ddp["fsdp_losses"]), torch.tensor(one_losses), rtol=1e-5, atol=1e-6)
    fdiff = (ddp["fsdp_coef"] - one_coef).abs().max().item()
    assert fdiff <= 1e-4 * moved, f"FSDP result differs by {fdiff:.3g} (parameters moved {moved:.3g})"

    # sharded evaluation: the one-process strided perplexity over the same windows
    from geosteer.eval.perplexity import strided_perplexity

    model, _, _ = _setup()
    one = strided_perplexity(model, _tok(), ids=_ppl_ids(), context=64, stride=24, batch_size=2).to_dict()
    assert ddp["ppl"]["windows"] == one["windows"] >= 7 and ddp["ppl"]["tokens"] == one["tokens"] == 199
    for k in ("ppl", "nll", "bits_per_byte"):
        assert ddp["ppl"][k] == pytest.approx(one[k], rel=1e-6), k
    assert ddp["mine"] == PROMPTS[0::2]  # rank 0's share
    assert [r["prompt"] for r in ddp["records"]] == PROMPTS
    assert [r["rank"] for r in ddp["records"]] == [i % 2 for i in range(len(PROMPTS))]


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
