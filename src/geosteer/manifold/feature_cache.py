"""The decode cache of key-side features (one per surface layer), reused across KV-cache decoding steps."""

from __future__ import annotations

import torch


class FeatureCache:
    """Key-side features of the keys seen in the previous call of one layer (KV-cache decoding).

    Valid only while the new call's past keys/values equal the cached ones exactly (checked each step), so
    a new prompt, a cropped or reordered cache, or a sliding window that dropped old keys never reuses
    stale features. Storage grows by doubling; rows are written in place.
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
            return self.f[:, :, self.start : self.end]
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
        self.f = f.new_empty(*f.shape[:2], cap, f.shape[3])
        self.k[:, :, :T] = key
        self.v[:, :, :T] = value
        self.f[:, :, :T] = f
        self.start, self.end, self.range = 0, T, rng

    def _append(self, k_new, v_new, f_new, start) -> None:
        n = k_new.shape[2]
        if self.end + n > self.k.shape[2]:
            keep = self.end - start
            cap = max(64, 2 * (keep + n))
            for name in ("k", "v", "f"):
                old = getattr(self, name)
                buf = old.new_empty(*old.shape[:2], cap, old.shape[3])
                buf[:, :, :keep] = old[:, :, start : self.end]
                setattr(self, name, buf)
            start, self.end = 0, keep
        self.k[:, :, self.end : self.end + n] = k_new
        self.v[:, :, self.end : self.end + n] = v_new
        self.f[:, :, self.end : self.end + n] = f_new
        self.start, self.end = start, self.end + n
