"""Evaluation and frozen-model sharding across processes (``accelerate launch``), giving one-process numbers.

:func:`shard` (items ``rank, rank + world, ...``), :func:`gather_records` (every process' records in item
order), :func:`sharded_perplexity` (windows spread, NLL sums all-reduced), :func:`shard_frozen_model` (FSDP2
over a frozen model's layers; ``TrainConfig(fsdp=True)``). One process: the plain computation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from geosteer.errors import GeosteerError
from geosteer.eval.perplexity import PerplexityResult, encode, window_spans
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import input_device


def _world(accelerator=None) -> tuple[int, int]:
    if accelerator is not None:
        return accelerator.process_index, accelerator.num_processes
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def shard(items: Sequence[Any], accelerator=None) -> list[Any]:
    """This process' items: ``items[rank::world]`` (balanced to within one item)."""
    rank, world = _world(accelerator)
    return list(items[rank::world])


def gather_records(records: list[Any], accelerator=None) -> list[Any]:
    """Undo :func:`shard`: interleave every process' ``records`` back into item order (on every process)."""
    rank, world = _world(accelerator)
    if world == 1:
        return list(records)
    parts: list[list[Any] | None] = [None] * world
    torch.distributed.all_gather_object(parts, list(records))
    out: list[Any] = []
    for i in range(max(len(p) for p in parts)):
        out.extend(p[i] for p in parts if i < len(p))
    return out


@torch.no_grad()
def sharded_perplexity(model, tok, text: str | None = None, *, ids: torch.Tensor | None = None,
                       context: int = 512, stride: int = 256, batch_size: int = 4,
                       max_tokens: int | None = None, accelerator=None):
    """Strided perplexity with windows spread over the processes; returns a ``PerplexityResult``."""

    if (text is None) == (ids is None):
        raise GeosteerError("give exactly one of text or ids")
    if text is not None:
        ids = encode(tok, text)
    ids = ids.reshape(-1)
    if max_tokens is not None:
        ids = ids[:max_tokens]
    spans = window_spans(len(ids), context, stride)
    mine = shard(spans, accelerator)
    device = input_device(model)
    nll = torch.zeros((), dtype=torch.float64)
    count = torch.zeros((), dtype=torch.float64)
    groups: dict[int, list[tuple[int, int, int]]] = {}
    for s in mine:
        groups.setdefault(s[1] - s[0], []).append(s)
    for length, group in groups.items():
        for i in range(0, len(group), batch_size):
            chunk = group[i:i + batch_size]
            x = torch.stack([ids[b:e] for b, e, _ in chunk]).to(device)
            logp = F.log_softmax(model(input_ids=x, use_cache=False).logits.float()[:, :-1], dim=-1)
            tok_nll = -logp.gather(-1, x[:, 1:].unsqueeze(-1)).squeeze(-1)
            for r, (_, _, trg) in enumerate(chunk):
                n = min(trg, length - 1)  # the first window's first token has no prediction
                nll += tok_nll[r, -n:].double().sum().cpu()
                count += n
    _, world = _world(accelerator)
    if world > 1:
        both = torch.stack([nll, count])
        torch.distributed.all_reduce(both)
        nll, count = both[0], both[1]
    total_nll, total_tok = float(nll), int(count)
    n_bytes = max(1, len(tok.decode(ids[1:], skip_special_tokens=True).encode("utf-8")))
    return PerplexityResult(ppl=math.exp(total_nll / total_tok), nll=total_nll / total_tok, tokens=total_tok,
                            bits_per_byte=total_nll / math.log(2) / n_bytes, context=context, stride=stride,
                            windows=len(spans))


def shard_frozen_model(model, accelerator=None):
    """Shard a frozen model's decoder layers (and its root: embeddings, final norm, head) with FSDP2.

    Every later forward must then run on all processes together (each layer all-gathers its weights), so
    evaluation under a sharded model runs on every process. One process: returns the model unchanged.
    """
    rank, world = _world(accelerator)
    if world == 1:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if any(p.requires_grad for p in model.parameters()):
        raise GeosteerError("shard_frozen_model expects a frozen base model (requires_grad_(False))")
    device = next(model.parameters()).device.type
    mesh = init_device_mesh(device, (world,))
    for block in anatomy(model).blocks:
        fully_shard(block.layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model
