"""Paper 3's value-space exclude-self edit (Eqs. 9-11) against an independent implementation.

The reference below is written apart from the method: plain torch forward hooks on each layer's attention
(to read its input and rotary tables) and on its output projection (to edit the concatenated head outputs),
with the attention probabilities recomputed from q_proj / k_proj / v_proj by hand. It imports nothing from
``geosteer.directional``; only the edit under test comes from the public ``ComponentScale``. Per head, the
cross-token message c_t = o_t - A_tt v_t is split against the query head's own value v_t; concatenated,
against v_t of every head laid end to end; the edited output is A_tt v_t + s_par c_par + s_perp c_perp.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import geosteer
from geosteer.directional import ComponentScale

GRID = [(0.0, 1.0), (0.5, 1.0), (3.0, 1.0), (1.0, 0.0), (0.3, 2.0)]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def _split(y: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """y = y_par + y_perp with y_par along z (last dim); z = 0 leaves y_par = 0."""
    zz = (z * z).sum(-1, keepdim=True)
    par = (y * z).sum(-1, keepdim=True) / torch.where(zz > 0, zz, torch.ones_like(zz)) * z
    return par, y - par


def reference_hooks(model, s_par: float, s_perp: float, concat: bool) -> list:
    """Hooks that make ``model`` compute the exclude-self edit at every layer; returns the handles."""
    cfg = model.config
    h_q, h_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // h_q
    handles, seen = [], {}
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn

        def read(mod, args, kwargs, i=i):
            hidden = kwargs.get("hidden_states", args[0] if args else None)
            pos = kwargs.get("position_embeddings", args[1] if len(args) > 1 else None)
            seen[i] = (hidden, pos)

        def edit(mod, args, i=i, attn=attn):
            hidden, (cos, sin) = seen.pop(i)
            b, t, _ = hidden.shape
            q = attn.q_proj(hidden).view(b, t, h_q, d).transpose(1, 2).double()
            k = attn.k_proj(hidden).view(b, t, h_kv, d).transpose(1, 2).double()
            v = attn.v_proj(hidden).view(b, t, h_kv, d).transpose(1, 2).double()
            cos, sin = cos[:, None].double(), sin[:, None].double()
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
            rep = h_q // h_kv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # (b, H, t, d)
            scores = q @ k.transpose(-1, -2) / math.sqrt(d)
            future = torch.ones(t, t, dtype=torch.bool).triu(1)
            probs = scores.masked_fill(future, float("-inf")).softmax(-1)
            a_tt = probs.diagonal(dim1=-2, dim2=-1)[..., None]  # (b, H, t, 1)
            o = args[0].view(b, t, h_q, d).transpose(1, 2).double()  # the model's own head outputs
            own = a_tt * v
            c = o - own
            if concat:
                flat = lambda x: x.transpose(1, 2).reshape(b, t, h_q * d)  # noqa: E731
                par, perp = _split(flat(c), flat(v))
                new = flat(own) + s_par * par + s_perp * perp
            else:
                par, perp = _split(c, v)
                new = (own + s_par * par + s_perp * perp).transpose(1, 2).reshape(b, t, h_q * d)
            return (new.to(args[0].dtype),)

        handles.append(attn.register_forward_pre_hook(read, with_kwargs=True))
        handles.append(attn.o_proj.register_forward_pre_hook(edit))
    return handles


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.float()


def _nll(logits: torch.Tensor, ids: torch.Tensor) -> float:
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).item()


def _compare(model, ids, s_par, s_perp, space) -> tuple[float, float, float]:
    """(max |logit difference|, method NLL, reference NLL) for one setting."""
    with geosteer.steer(model, ComponentScale("value_exclude_self", s_par=s_par, s_perp=s_perp, value_space=space)):
        ours = _logits(model, ids)
    handles = reference_hooks(model, s_par, s_perp, concat=space == "concat")
    try:
        ref = _logits(model, ids)
    finally:
        for h in handles:
            h.remove()
    return (ours - ref).abs().max().item(), _nll(ours, ids), _nll(ref, ids)


@pytest.mark.parametrize("space", ["head", "concat"])
@pytest.mark.parametrize("s_par, s_perp", GRID)
def test_exclude_self_matches_plain_hooks_on_a_tiny_model(tiny_model, s_par, s_perp, space):
    model, _ = tiny_model("llama")
    ids = torch.randint(5, 200, (2, 24), generator=torch.Generator().manual_seed(0))
    stock = _logits(model, ids)
    diff, ours, ref = _compare(model, ids, s_par, s_perp, space)
    assert diff < 1e-4, diff
    assert abs(ours - ref) < 1e-5
    if (s_par, s_perp) != (1.0, 1.0):  # the edit does something, so agreement is not trivial
        with geosteer.steer(model, ComponentScale("value_exclude_self", s_par=s_par, s_perp=s_perp,
                                                  value_space=space)):
            assert (_logits(model, ids) - stock).abs().max().item() > 1e-3


def test_the_reference_is_neutral_and_tells_the_spaces_apart(tiny_model):
    model, _ = tiny_model("llama")
    ids = torch.randint(5, 200, (1, 16), generator=torch.Generator().manual_seed(1))
    stock = _logits(model, ids)
    for concat in (False, True):
        handles = reference_hooks(model, 1.0, 1.0, concat)
        try:
            assert (_logits(model, ids) - stock).abs().max().item() < 1e-4
        finally:
            for h in handles:
                h.remove()
    outs = []
    for concat in (False, True):
        handles = reference_hooks(model, 0.0, 1.0, concat)
        try:
            outs.append(_logits(model, ids))
        finally:
            for h in handles:
                h.remove()
    assert (outs[0] - outs[1]).abs().max().item() > 1e-3


@pytest.mark.parametrize("space", ["head", "concat"])
def test_exclude_self_matches_plain_hooks_on_smollm2(smollm2, space):
    """The edit of the report's value-space items on the real model: s_par 0, 0.5 and 3 (the sweep's grid),
    logits and the NLL it turns into, method against reference."""
    model, tok = smollm2
    text = ("The history of the city begins with a small settlement on the river, where traders met to "
            "exchange salt, grain and cloth before the first walls were built.")
    ids = tok(text, return_tensors="pt").input_ids
    for s_par in (0.0, 0.5, 3.0):
        diff, ours, ref = _compare(model, ids, s_par, 1.0, space)
        assert diff < 2e-3, (s_par, diff)
        assert abs(ours - ref) < 1e-4 * max(1.0, ref), (s_par, ours, ref)
