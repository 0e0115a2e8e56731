"""The decode cache of key-side features (one per surface layer), reused across KV-cache decoding steps."""

from __future__ import annotations

import torch


class FeatureCache:
    """Key-side features of the keys seen in the previous call of one layer (KV-cache decoding).

    Reused only while the past keys/values equal the cached ones exactly (checked each step). Stored
    feature-major (b, h, width, capacity), grown by doubling, handed out as a (b, h, keys, width) view.
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.k = self.v = self.f = None
        self.start = self.end = 0
        self.range = None

    def get(self, key, value, n_new, rng, compute) -> torch.Tensor:
        T = key.shape[2]
        past = T - n_new
        if self.f is not None and self._matches(key, value, past, rng):
            start = self.end - past
            new_f = compute(key[:, :, past:], value[:, :, past:])
            self._append(key[:, :, past:], value[:, :, past:], new_f, start)
            return self.f[:, :, :, self.start : self.end].transpose(-1, -2)
        f = compute(key, value)
        self._store(key, value, f, rng)
        return f

    def _matches(self, key, value, past, rng) -> bool:
        k = self.k
        if (rng != self.range or k.shape[0] != key.shape[0] or k.shape[1] != key.shape[1]
                or k.shape[3] != key.shape[3] or k.dtype != key.dtype or k.device != key.device
                or past > self.end - self.start or past <= 0):
            return False
        lo = self.end - past
        return torch.equal(key[:, :, :past], k[:, :, lo : self.end]) and torch.equal(
            value[:, :, :past], self.v[:, :, lo : self.end])

    def _store(self, key, value, f, rng) -> None:
        T = key.shape[2]
        cap = max(64, 2 * T)
        self.k = key.new_empty(*key.shape[:2], cap, key.shape[3])
        self.v = value.new_empty(*value.shape[:2], cap, value.shape[3])
        self.f = f.new_empty(*f.shape[:2], f.shape[3], cap)
        self.k[:, :, :T] = key
        self.v[:, :, :T] = value
        self.f[:, :, :, :T] = f.transpose(-1, -2)
        self.start, self.end, self.range = 0, T, rng

    def _append(self, k_new, v_new, f_new, start) -> None:
        n = k_new.shape[2]
        if self.end + n > self.k.shape[2]:
            keep = self.end - start
            cap = max(64, 2 * (keep + n))
            for name in ("k", "v"):
                old = getattr(self, name)
                buf = old.new_empty(*old.shape[:2], cap, old.shape[3])
                buf[:, :, :keep] = old[:, :, start : self.end]
                setattr(self, name, buf)
            buf = self.f.new_empty(*self.f.shape[:3], cap)
            buf[..., :keep] = self.f[..., start : self.end]
            self.f = buf
            start, self.end = 0, keep
        self.k[:, :, self.end : self.end + n] = k_new
        self.v[:, :, self.end : self.end + n] = v_new
        self.f[..., self.end : self.end + n] = f_new.transpose(-1, -2)
        self.start, self.end = start, self.end + n


class StaticFeatureCache:
    """Key-side features of one static KV cache layer (transformers' ``StaticLayer``), preallocated.

    Each call writes the features of its new rows ``[n − L, n)`` in place (static shapes, fixed address, no
    host sync: CUDA graphs and ``torch.compile(fullgraph=True)``). An eager call checks that earlier rows
    came through this cache and marks it ``live``; a traced call uses it only while live; ``forget`` ends it.
    """

    def __init__(self) -> None:
        self.f = None
        self.source = None  # (id of the KV layer, key buffer address, grid range) the rows were computed for
        self.end: int | None = None  # rows [0, end) hold valid features (None: unknown, after a traced call)
        self.live = False  # the rows before the next call are valid (what a traced call relies on)

    def forget(self) -> None:
        """The KV cache took a step without this cache: its rows are no longer complete."""
        self.live = False

    def get(self, kv_layer, key, value, n_new: int, rng, compute, tracing: bool):
        """The features of all rows (b, Hkv, max_len, F), this call's written; None while tracing a cache
        that is not live."""
        rows = kv_layer.cumulative_length - n_new + torch.arange(n_new, device=key.device)
        if tracing:
            if not self.live or self.f is None or self.f.shape[:3] != key.shape[:3]:
                return None
            self.f.index_copy_(2, rows, compute(key.index_select(2, rows), value.index_select(2, rows)))
            self.end = None
            return self.f
        source = (id(kv_layer), key.data_ptr(), rng)
        end = int(kv_layer.cumulative_length)
        start = end - n_new
        if (self.f is None or not self.live or self.source != source or self.f.shape[:3] != key.shape[:3]
                or self.end is None or not 0 <= start <= self.end or end > key.shape[2]):
            self._fill(compute(key, value))
        else:
            self.f.index_copy_(2, rows, compute(key[:, :, start:end], value[:, :, start:end]))
        self.source, self.end, self.live = source, end, True
        return self.f

    def _fill(self, f: torch.Tensor) -> None:
        if self.f is not None and self.f.shape == f.shape and self.f.dtype == f.dtype:
            self.f.copy_(f)  # keep the address (a graph captured it)
            return
        self.f = f.contiguous()
        torch._dynamo.mark_static_address(self.f)


def static_kv_layer(kv_layer, key: torch.Tensor, value: torch.Tensor):
    """``kv_layer`` if it is a full-attention static cache layer whose buffers are ``key``/``value`` (the
    call's keys are exactly the cache's rows), else None. Sliding-window static layers shift their rows once
    full, so they get no feature cache (their window bounds the work)."""
    if not is_static_kv(kv_layer) or getattr(kv_layer, "is_sliding", False):
        return None
    if getattr(kv_layer, "keys", None) is not key or getattr(kv_layer, "values", None) is not value:
        return None
    return kv_layer


def is_static_kv(kv_layer) -> bool:
    """Whether ``kv_layer`` is one of transformers' static (fixed-size, compile-friendly) cache layers."""
    from transformers.cache_utils import StaticLayer

    return isinstance(kv_layer, StaticLayer)


def kv_layer_of(kwargs: dict, layer_idx: int):
    """The KV cache layer an attention module's forward received (``cache``, ``layer_past`` or
    ``past_key_values``; the self-attention part of an encoder-decoder cache), else None."""
    cache = None
    for name in ("cache", "layer_past", "past_key_values"):
        if kwargs.get(name) is not None:
            cache = kwargs[name]
            break
    cache = getattr(cache, "self_attention_cache", cache)
    layers = getattr(cache, "layers", None)
    if layers is None or not 0 <= layer_idx < len(layers):
        return None
    return layers[layer_idx]


def watch_kv_layers(modules: dict, seen: dict):
    """Hooks on attention ``modules`` ({slot: module}) that put the KV cache layer of each forward in
    ``seen[slot]`` for the duration of that forward -> remove."""
    handles = []
    for slot, module in modules.items():
        def pre(mod, args, kwargs, slot=slot):
            seen[slot] = kv_layer_of(kwargs, int(getattr(mod, "layer_idx", -1)))

        def post(mod, args, kwargs, out, slot=slot):
            seen.pop(slot, None)

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))

    def remove() -> None:
        for h in handles:
            h.remove()
        seen.clear()

    return remove
