"""Learned walls: a short list of exact wall regions that suppress a target continuation.

1. **Candidates**: attribution patching; zeroing channel (l, h, d) changes the target log-prob by
   ≈ −Σ_i g_id o_id; score = target drop − control change; the top N get a box over their q, k quantiles.
2. **Relaxation** (:class:`SoftWalls`): candidate w removes g_w · m_Q(q_i) m_K(k_j) of a_ij v_jd (1 + S_d),
   g_w = σ(a_w), m(x) = σ((x − lo)/t)·σ((hi − x)/t) with t annealed; L1 on the gates.
3. **Harden** (:meth:`SoftWalls.harden`): gates > 0.5 become exact walls (what ships).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from geosteer.attention import attach_handlers
from geosteer.errors import GeosteerError
from geosteer.kernels.bspline import bspline_basis
from geosteer.kernels.sdpa import prepare, weights_block
from geosteer.manifold.walls import Wall
from geosteer.train.prompts import (  # noqa: F401 - the prompt files and batches, re-exported for their users
    Batch,
    control_kl,
    control_logprobs,
    encode_controls,
    encode_targets,
    read_controls,
    read_targets,
    target_logprob,
)


@dataclass
class WallLearnConfig:
    """Settings of one wall-learning run (recorded in the artifact and the checkpoint)."""

    layers: list[int] | None = None  # candidate layers (None: the bank's layers)
    candidates: int = 256  # channels kept after scoring (one channel alone barely moves the model)
    steps: int = 30
    lr: float = 0.1  # AdamW on gate logits and box edges (dense mode: on the coefficients)
    kl_threshold: float = 0.02  # τ: control next-token KL allowed before the penalty acts (nats)
    kl_weight: float = 100.0  # λ
    sparsity: float = 0.002  # L1 weight on the gates (per gate)
    temp_start: float = 0.3  # box-edge temperature in units of the channel's spread, annealed
    temp_end: float = 0.02
    gate_init: float = 0.0  # gate logit at the start (σ = 0.5)
    quantiles: tuple[float, float] = (0.02, 0.98)  # starting box from the target q/k values
    control_weight: float = 1.0  # β in the candidate score
    mode: str = "walls"  # "walls" (learned regions) | "dense" (fine-tune all surface coefficients)
    add_bos: bool | None = None  # None: encode prompts as the tokenizer does; True: BOS first (train.prompts)
    seed: int = 0
    checkpoint_every: int = 5
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.quantiles = tuple(float(x) for x in self.quantiles)
        self.validate()

    def validate(self) -> None:
        if not (self.kl_threshold > 0 and math.isfinite(self.kl_threshold)):
            raise GeosteerError(f"the KL threshold must be a positive number of nats (got {self.kl_threshold})")
        if self.candidates < 1:
            raise GeosteerError(f"candidates must be >= 1 (got {self.candidates})")
        if self.steps < 1:
            raise GeosteerError(f"steps must be >= 1 (got {self.steps})")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise GeosteerError(f"lr must be a positive number (got {self.lr})")
        if self.kl_weight < 0 or self.sparsity < 0 or self.control_weight < 0:
            raise GeosteerError("kl_weight, sparsity and control_weight must be >= 0")
        if not 0 < self.temp_end <= self.temp_start:
            raise GeosteerError(f"temperatures need 0 < end <= start (got {self.temp_start} -> {self.temp_end})")
        lo, hi = self.quantiles
        if not 0.0 <= lo < hi <= 1.0:
            raise GeosteerError(f"quantiles must satisfy 0 <= lo < hi <= 1 (got {self.quantiles})")
        if self.mode not in ("walls", "dense"):
            raise GeosteerError(f"mode must be walls or dense (got {self.mode!r})")
        if self.checkpoint_every < 0:
            raise GeosteerError("checkpoint_every must be >= 0")
        if self.add_bos not in (None, True, False):
            raise GeosteerError(f"add_bos must be None (follow the tokenizer), True or False (got {self.add_bos!r})")

    def temperature(self, step: int) -> float:
        """Geometric anneal from ``temp_start`` (step 0) to ``temp_end`` (last step)."""
        frac = step / max(1, self.steps - 1)
        return self.temp_start * (self.temp_end / self.temp_start) ** min(1.0, frac)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["quantiles"] = list(self.quantiles)
        return d


# ----------------------------------------------------------------------------------------- soft walls
def _soft_box(x: torch.Tensor, lo, hi, t) -> torch.Tensor:
    """σ((x − lo)/t)·σ((hi − x)/t); ``lo``/``hi``/``t`` (P,) broadcast over x (b, P, n)."""
    return torch.sigmoid((x - lo[:, None]) / t[:, None]) * torch.sigmoid((hi[:, None] - x) / t[:, None])


def _hard_box(x: torch.Tensor, lo, hi) -> torch.Tensor:
    xd = x.double()
    return ((xd >= lo[:, None].double()) & (xd <= hi[:, None].double())).to(x.dtype)


class SoftWalls(nn.Module):
    """Candidate walls with soft boxes and gates (parameters ``gate``, ``q_lo/q_hi/k_lo/k_hi``).

    Attach it outside the surfaces (``steer(model, soft, bank)``) so it removes a share of the full
    modulated flow; ``hard=True`` computes exactly the hardened walls' edit.
    """

    def __init__(self, cands: list[dict], bank=None, temperature: float = 0.3) -> None:
        super().__init__()
        if not cands:
            raise GeosteerError("no candidate walls to learn")
        self.cands = [dict(c) for c in cands]
        f = lambda key, i: torch.tensor([float(c[key][i]) for c in cands])  # noqa: E731
        self.gate = nn.Parameter(torch.zeros(len(cands)))
        self.q_lo, self.q_hi = nn.Parameter(f("q", 0)), nn.Parameter(f("q", 1))
        self.k_lo, self.k_hi = nn.Parameter(f("k", 0)), nn.Parameter(f("k", 1))
        self.register_buffer("q_scale", torch.tensor([float(c["q_scale"]) for c in cands]))
        self.register_buffer("k_scale", torch.tensor([float(c["k_scale"]) for c in cands]))
        self._bank = [bank]  # a list: an nn.Module attribute would register the bank's parameters here
        self.temperature = float(temperature)
        self.hard = False
        self.layers = sorted({int(c["layer"]) for c in cands})

    @property
    def bank(self):
        return self._bank[0]

    def gates(self) -> torch.Tensor:
        return torch.sigmoid(self.gate)

    def attach(self, model: nn.Module):

        return attach_handlers(model, self.layers, self._make)

    def _make(self, layer: int):
        idx = torch.tensor([i for i, c in enumerate(self.cands) if int(c["layer"]) == layer])
        heads = torch.tensor([int(self.cands[i]["head"]) for i in idx])
        dims = torch.tensor([int(self.cands[i]["dim"]) for i in idx])

        def handler(call, proceed):
            out, w = proceed(call)
            return self._correct(call, out, layer, idx, heads, dims), w

        return handler

    def _correct(self, call, out, layer, idx, heads, dims):
        q = call.query
        is_causal = call.kwargs.get("is_causal")
        if is_causal is None:
            is_causal = getattr(call.module, "is_causal", True)
        # the same crop, mask and scaling as the exact walls (walls.walled_output) and the bank's kernel
        key, value, _, qg, common = prepare(q, call.key, call.value, attn_mask=call.attention_mask,
                                            is_causal=bool(is_causal), scaling=call.scaling,
                                            softcap=call.kwargs.get("softcap"), dropout=0.0)
        rep = qg.shape[2]
        p = weights_block(qg, key, 0, common["L"], 0, common["T"], **common)
        dev = q.device
        hp, dp, ix = heads.to(dev), dims.to(dev), idx.to(dev)
        g = torch.div(hp, rep, rounding_mode="floor")
        pw = p[:, g, hp % rep]  # (b, P, L, T)
        qv = q.transpose(-1, -2)[:, hp, dp]  # (b, P, L)
        kv = key.transpose(-1, -2)[:, g, dp]
        vv = value.transpose(-1, -2)[:, g, dp]
        bank = self.bank
        if bank is not None and layer in bank.layers and bool(bank.enabled):
            slot = bank.slot(layer)
            lo, hi = float(bank.lo[slot]), float(bank.hi[slot])
            c = bank.coefficients[slot][hp, dp].to(q.dtype)  # (P, K, K)
            feats = torch.cat([vv.unsqueeze(-1) * bspline_basis(kv, bank.grid_size, lo, hi), vv.unsqueeze(-1)], -1)
            qb = torch.einsum("bplk,pkc->bplc", bspline_basis(qv, bank.grid_size, lo, hi), c)
            qfac = torch.cat([qb, torch.ones_like(qb[..., :1])], -1)
        else:
            feats, qfac = vv.unsqueeze(-1), None
        if self.hard:
            gate = (self.gates()[ix] > 0.5).to(q.dtype)
            mq = _hard_box(qv, self.q_lo[ix], self.q_hi[ix])
            mk = _hard_box(kv, self.k_lo[ix], self.k_hi[ix])
        else:
            gate = self.gates()[ix].to(q.dtype)
            mq = _soft_box(qv, self.q_lo[ix], self.q_hi[ix], self.temperature * self.q_scale[ix])
            mk = _soft_box(kv, self.k_lo[ix], self.k_hi[ix], self.temperature * self.k_scale[ix])
        blocked = torch.matmul(pw, feats * mk.unsqueeze(-1))  # (b, P, L, K+1 | 1)
        blocked = (blocked * qfac).sum(-1) if qfac is not None else blocked[..., 0]
        corr = (gate[None, :, None] * mq * blocked).transpose(1, 2)  # (b, L, P)
        out = out.clone()
        out[:, :, hp, dp] = out[:, :, hp, dp] - corr.to(out.dtype)
        return out

    def harden(self) -> list:
        """The exact walls: candidates with gate > 0.5 and a non-empty box (lo < hi on both axes)."""

        walls = []
        g = self.gates().detach()
        for i, c in enumerate(self.cands):
            box = [float(x.detach()[i]) for x in (self.q_lo, self.q_hi, self.k_lo, self.k_hi)]
            if float(g[i]) > 0.5 and box[0] < box[1] and box[2] < box[3]:
                walls.append(Wall(layer=int(c["layer"]), heads=(int(c["head"]),), dims=(int(c["dim"]),),
                                  q=(box[0], box[1]), k=(box[2], box[3])))
        return walls
