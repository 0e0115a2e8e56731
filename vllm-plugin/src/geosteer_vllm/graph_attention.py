"""Attention operations (surfaces on the shared-key path, ``value_full``) in vLLM's compiled graph.

They run inside one opaque custom op, ``geosteer::attention_ops``, called by the graph as vLLM's own
attention op is (its body runs at every forward, never traced). CPU build only: a CUDA graph replays only
captured kernels, so on a GPU these recipes run eager.
"""

from __future__ import annotations

import torch
from vllm.model_executor.layers.attention import Attention

from geosteer.errors import GeosteerError
from geosteer_vllm.layers import ChannelAttention, apply_attention_ops, shared_key_layer
from geosteer_vllm.plan import surface_of

_LAYERS: dict[str, ChannelAttention] = {}


@torch.library.custom_op("geosteer::attention_ops", mutates_args=())
def attention_ops(out: torch.Tensor, query: torch.Tensor, value: torch.Tensor, layer_name: str) -> torch.Tensor:
    """The recipes' attention operations on the stock attention output ``out`` (n, H·d) of layer
    ``layer_name``, each on its own rows (``serve.layers``)."""
    attn = _LAYERS[layer_name]
    n, h, hkv, d = out.shape[0], attn.heads, attn.kv_heads, attn.head_dim
    o = out.view(n, h, d)
    y = apply_attention_ops(attn, o, None, query.reshape(n, h, d), value.reshape(n, hkv, d))
    return y.reshape(n, h * d).clone() if y.data_ptr() == o.data_ptr() else y.reshape(n, h * d)


@attention_ops.register_fake
def _(out: torch.Tensor, query: torch.Tensor, value: torch.Tensor, layer_name: str) -> torch.Tensor:
    return torch.empty_like(out)


class CompiledAttention(ChannelAttention):
    """vLLM's stock attention and KV cache, then ``geosteer::attention_ops`` (surfaces on the shared-key path)."""

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        out = Attention.forward(self, query, key, value)
        return torch.ops.geosteer.attention_ops(out, query, value, self.layer_name)


def install(attn_module, ops: list, layer: int) -> None:
    """Replace ``attn_module.attn`` (vLLM's ``Attention``) by a :class:`CompiledAttention` for ``ops`` (the
    start recipes' operations on this layer)."""
    stock = attn_module.attn
    if any(surface_of(o) is not None for o in ops) and not shared_key_layer(stock, ops):
        raise GeosteerError("surfaces run in the compiled graph only on the shared-key path (vLLM's CPU build, "
                            "float32, geosteer's compiled CPU kernels built); run this engine with --enforce-eager")
    new = CompiledAttention(stock, ops, layer, shared=True)
    _LAYERS[new.layer_name] = new
    attn_module.attn = new
