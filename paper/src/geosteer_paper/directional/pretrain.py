"""Study 3: training-time parallel removal in small from-scratch models (paper Section 7, Figure 5).

A small Llama-style decoder (byte-level, vocab 256) is trained from scratch on the corpus train split with
the same seed, data order and steps for each variant; the variant's edit is active in training *and*
evaluation, exactly as the inference-time intervention (``ComponentScale`` through ``geosteer.steer``):

- ``baseline``   no edit
- ``attn_par``   residual attention parallel removal, ``ComponentScale("attn_out", s_par=0)``
- ``value_par``  value-space parallel removal on the full aggregate, ``ComponentScale("value_full", s_par=0)``
  (the paper's V-Para Rem. for pretraining)

Validation loss is the mean next-byte cross-entropy (nats) on fixed held-out batches.
"""

from __future__ import annotations

import math
import time

import torch

from geosteer.attention import use_geosteer_attention
from geosteer.data.corpus import split_text
from geosteer.directional.sites import ComponentScale
from geosteer.interventions import steer

VARIANTS = {"baseline": None, "attn_par": ("attn_out", 0.0), "value_par": ("value_full", 0.0)}


def byte_ids(split: str, max_chars: int | None = None) -> torch.Tensor:
    """The UTF-8 bytes of a corpus split as token ids (vocabulary 256)."""

    return torch.tensor(list(split_text(split, max_chars=max_chars).encode("utf-8")), dtype=torch.long)


def small_model(d_model: int = 128, layers: int = 4, heads: int = 4, ffn: int = 384, ctx: int = 128,
                seed: int = 0):
    """A fresh byte-level Llama-style model (fp32) with the geosteer attention function."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=256, hidden_size=d_model, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=ctx,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    use_geosteer_attention(model)
    return model


def sample_batch(data: torch.Tensor, gen: torch.Generator, batch: int, ctx: int) -> torch.Tensor:
    """``batch`` random windows of ``ctx + 1`` tokens of ``data`` (inputs and their next tokens), drawn by ``gen``."""
    start = torch.randint(0, len(data) - ctx - 1, (batch,), generator=gen)
    return torch.stack([data[s:s + ctx + 1] for s in start.tolist()])


@torch.no_grad()
def mean_loss(model, xs: list[torch.Tensor]) -> float:
    """Mean :func:`lm_loss` over the batches ``xs`` in eval mode (the validation loss), nats."""
    model.eval()
    tot = 0.0
    for x in xs:
        tot += lm_loss(model, x).item()  # not labels=: HF would shift the (already shifted) labels again
    model.train()
    return tot / len(xs)


def lm_loss(model, x: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of ``x`` (b, ctx + 1): positions ≤ t predict token t + 1."""
    logits = model(input_ids=x[:, :-1], use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


def warmup_cosine_lr(step: int, lr: float, steps: int) -> float:
    """The pretraining schedule: linear warmup over the first 10 % of ``steps``, then cosine to 0."""
    warm = max(1, steps // 10)
    if step < warm:
        return lr * (step + 1) / warm
    return lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def train_step(model, opt: torch.optim.Optimizer, params: list[torch.Tensor], train: torch.Tensor,
               gen: torch.Generator, *, step: int, steps: int, lr: float, batch: int, ctx: int) -> torch.Tensor:
    """One step of the pretraining loop: the learning rate of :func:`warmup_cosine_lr` on every parameter group,
    a batch drawn by ``gen``, the gradients of ``params`` clipped to norm 1; returns the batch's loss."""
    for g in opt.param_groups:
        g["lr"] = warmup_cosine_lr(step, lr, steps)
    loss = lm_loss(model, sample_batch(train, gen, batch, ctx))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return loss


def train_one(variant: str, seed: int, train: torch.Tensor, val_batches: list[torch.Tensor], *, steps: int,
              batch: int, ctx: int, lr: float, eval_every: int, model_kw: dict, log=print) -> dict:
    """Train one model; returns {"curve": [...], "final_val": float, "params": int, "seconds": float}."""

    model = small_model(ctx=ctx, seed=seed, **model_kw)
    model.train()
    ivs = [] if VARIANTS[variant] is None else [ComponentScale(VARIANTS[variant][0], s_par=VARIANTS[variant][1])]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1000 + seed)  # same data order for every variant of a seed
    params = list(model.parameters())
    curve = []
    t0 = time.time()
    with steer(model, *ivs):
        for step in range(steps):
            loss = train_step(model, opt, params, train, gen, step=step, steps=steps, lr=lr, batch=batch, ctx=ctx)
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                val = mean_loss(model, val_batches)
                curve.append({"variant": variant, "seed": seed, "step": step + 1, "train_loss": loss.item(),
                              "val_loss": val})
                log(f"{variant} seed {seed} step {step + 1}: train {loss.item():.4f} val {val:.4f} "
                    f"({time.time() - t0:.0f} s)")
    n_params = sum(p.numel() for p in model.parameters())
    return {"curve": curve, "final_val": curve[-1]["val_loss"], "params": n_params, "seconds": time.time() - t0}
