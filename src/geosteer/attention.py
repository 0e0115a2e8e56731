"""The registered attention function ``"geosteer"``: value-level access on every family, stock SDPA otherwise.

With no handler on a module it calls transformers' ``sdpa_attention_forward`` unchanged (bit-identical
logits). Handlers form a chain: ``handler(call, proceed)`` gets the post-RoPE query and the keys/values
before GQA expansion; ``proceed`` runs the rest of the chain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from geosteer.kernels import triton as fused
from geosteer.models.anatomy import anatomy

ATTN_NAME = "geosteer"
_HANDLERS_ATTR = "_geosteer_attention_handlers"


@dataclass
class AttentionCall:
    """One attention call as transformers made it (tensors are post-RoPE, before GQA expansion)."""

    module: nn.Module
    query: torch.Tensor  # (batch, n_heads, q_len, head_dim)
    key: torch.Tensor  # (batch, n_kv_heads, k_len, head_dim)
    value: torch.Tensor  # (batch, n_kv_heads, k_len, head_dim)
    attention_mask: torch.Tensor | None
    scaling: float | None
    dropout: float
    kwargs: dict = field(default_factory=dict)

    @property
    def layer_idx(self) -> int:
        return int(self.module.layer_idx)

    @property
    def n_rep(self) -> int:
        return self.query.shape[1] // self.key.shape[1]

    @property
    def effective_scaling(self) -> float:
        return self.scaling if self.scaling is not None else self.query.shape[-1] ** -0.5

    def with_(self, **changes) -> AttentionCall:
        return replace(self, **changes)


# A handler gets the call and ``proceed(call) -> (output (b, q, heads, dv), weights|None)``.
AttentionHandler = Callable[[AttentionCall, Callable[[AttentionCall], tuple]], tuple]


def stock_attention(call: AttentionCall) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' SDPA path, unchanged. Output (b, q, heads, dv) as transformers expects."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(
        call.module, call.query, call.key, call.value, call.attention_mask,
        dropout=call.dropout, scaling=call.scaling, **call.kwargs,
    )


def geosteer_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                               **kwargs):
    handlers = getattr(module, _HANDLERS_ATTR, None)
    if not handlers:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    call = AttentionCall(module, query, key, value, attention_mask, scaling, dropout, kwargs)
    chain = list(handlers)

    def run(i: int, c: AttentionCall):
        if i == len(chain):
            return stock_attention(c)
        return chain[i](c, _Proceed(lambda c2: run(i + 1, c2), stock_next=i + 1 == len(chain)))

    return run(0, call)


class _Proceed:
    """The ``proceed`` a handler gets; ``stock_next`` tells whether it runs the stock attention directly
    (no other handler after this one), so a read-only handler may run the stock kernel itself."""

    __slots__ = ("fn", "stock_next")

    def __init__(self, fn: Callable[[AttentionCall], tuple], stock_next: bool) -> None:
        self.fn, self.stock_next = fn, stock_next

    def __call__(self, call: AttentionCall) -> tuple:
        return self.fn(call)


_LSE_SAFE_KWARGS = {"position_ids", "use_cache", "sliding_window", "cache_position", "output_attentions"}


def stock_attention_with_lse(call: AttentionCall) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(stock output (b, q, heads, dv), row log-sum-exp (b, heads, q)), or None when no kernel gives both.

    CPU plain causal calls use PyTorch's fused flash kernel (the stock output bit for bit); CUDA (or
    ``TRITON_INTERPRET=1`` with ``GEOSTEER_MANIFOLD_BACKEND=triton``) uses the Triton kernel without surfaces
    (fp32 rounding). Anything else returns None and the caller uses ``proceed``.
    """
    q, k, v = call.query, call.key, call.value
    if (call.dropout or set(call.kwargs) - _LSE_SAFE_KWARGS or call.kwargs.get("output_attentions")
            or not q.dtype.is_floating_point):
        return None
    causal = getattr(call.module, "is_causal", True)
    if (q.device.type == "cpu" and call.attention_mask is None and causal and q.shape[2] > 1
            and q.shape[2] == k.shape[2] and q.dtype in (torch.float32, torch.float64)):
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True,
                                                                              scale=call.scaling)
        return out.transpose(1, 2).contiguous(), lse
    if not _triton_stock_applies(q):
        return None
    return fused.modulated_attention_triton(q, k, v, None, 1, 0.0, 1.0, attn_mask=call.attention_mask,
                                            is_causal=bool(causal), scaling=call.scaling, return_lse=True)


def _triton_stock_applies(query: torch.Tensor) -> bool:
    """Whether the Triton stock kernel gives the log-sum-exp here (see :func:`stock_attention_with_lse`)."""
    import os

    backend = os.environ.get("GEOSTEER_MANIFOLD_BACKEND", "")
    if backend in ("torch", "cpu") or (query.device.type != "cuda" and backend != "triton"):
        return False
    return fused.applies(query, 0.0, 1.0)


_registered = False


def register() -> None:
    """Register ``"geosteer"`` with transformers' attention and mask interfaces (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTN_NAME, geosteer_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_NAME, sdpa_mask)
    _registered = True


def use_geosteer_attention(model: nn.Module) -> None:
    """Switch ``model`` (all sub-configs) to the geosteer attention function. Neutral by itself."""
    register()
    if getattr(model.config, "_attn_implementation", None) == ATTN_NAME:
        return
    try:
        model.set_attn_implementation(ATTN_NAME)
    except (ValueError, AttributeError):
        model.config._attn_implementation = ATTN_NAME
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            cfg._attn_implementation = ATTN_NAME


def add_attention_handler(module: nn.Module, handler: AttentionHandler) -> Callable[[], None]:
    """Append ``handler`` to ``module``'s chain; returns a function that removes exactly it."""
    handlers = getattr(module, _HANDLERS_ATTR, None)
    if handlers is None:
        handlers = []
        setattr(module, _HANDLERS_ATTR, handlers)
    handlers.append(handler)

    def remove() -> None:
        lst = getattr(module, _HANDLERS_ATTR, [])
        for i, h in enumerate(lst):
            if h is handler:
                del lst[i]
                break

    return remove


def attach_handlers(model: nn.Module, layers: Sequence[int] | None,
                    make: Callable[[int], AttentionHandler]) -> Callable[[], None]:
    """Add ``make(layer)`` to the attention chain of each of ``layers`` (None = all); return the remover.

    The one loop every value-level intervention uses: switches ``model`` to the geosteer attention
    function, checks the layers, and removes in reverse order (also what was added before an error).
    """

    use_geosteer_attention(model)
    an = anatomy(model)
    removers: list[Callable[[], None]] = []

    def remove() -> None:
        while removers:
            removers.pop()()

    try:
        for layer in an.check_layers(layers):
            removers.append(add_attention_handler(an.blocks[layer].attn, make(layer)))
    except Exception:
        remove()
        raise
    return remove


def attention_handlers(module: nn.Module) -> list:
    return list(getattr(module, _HANDLERS_ATTR, []) or [])


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(b, kv_heads, s, d) → (b, kv_heads·n_rep, s, d) in HF order: query head h reads kv head h // n_rep."""
    if n_rep == 1:
        return x
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


def additive_mask(call: AttentionCall, q_len: int, k_len: int) -> torch.Tensor | None:
    """The mask the stock path applies, as a boolean (b|1, 1|h, q, k) tensor (True = attend).

    transformers passes ``None`` when the mask is purely causal (SDPA then uses ``is_causal``); this
    rebuilds that causal mask explicitly, aligned to the end of the key sequence (KV cache).
    """
    m = call.attention_mask
    if m is not None:
        if m.dtype == torch.bool:
            return m[..., :k_len]
        return m[..., :k_len] > torch.finfo(m.dtype).min / 2
    if q_len == 1 or not getattr(call.module, "is_causal", True):
        return None
    offset = k_len - q_len
    i = torch.arange(q_len, device=call.query.device)[:, None] + offset
    j = torch.arange(k_len, device=call.query.device)[None, :]
    return (j <= i)[None, None]


def attention_weights(call: AttentionCall) -> torch.Tensor:
    """Materialise a_ij (b, heads, q, k) exactly as the stock path computes them (for references/tests)."""
    q, k = call.query, repeat_kv(call.key, call.n_rep)
    scores = (q @ k.transpose(-1, -2)) * call.effective_scaling
    mask = additive_mask(call, q.shape[2], k.shape[2])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)
