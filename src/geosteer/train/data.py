"""Token windows for training and a seeded, resumable batch order.

Text (the bundled corpus' train split or any text file) is tokenised once into one stream (documents
joined by a blank line), cut into non-overlapping windows of ``seq_len`` tokens, and each window gets the
tokenizer's BOS in front (as the evaluation does). The batch of step ``s`` is a pure function of
``(seed, s)``: a fresh permutation of the windows per epoch, so a resumed run sees exactly the batches
that the uninterrupted run would have seen.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from geosteer.errors import GeosteerError


def load_texts(source: str | Path | None = "train") -> list[str]:
    """Documents to train on: ``"train"``/``"heldout"`` (bundled corpus split) or a UTF-8 text file."""
    from geosteer.data.corpus import SPLITS, split_texts

    if source is None:
        source = "train"
    if isinstance(source, str) and source in SPLITS:
        return split_texts(source)
    path = Path(source)
    if not path.is_file():
        raise GeosteerError(f"training text '{source}' is neither a corpus split ({', '.join(SPLITS)}) "
                            "nor a readable text file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise GeosteerError(f"cannot read training text {path} as UTF-8 ({type(e).__name__})") from None
    docs = [d.strip() for d in text.split("\n\n") if d.strip()]
    if not docs:
        raise GeosteerError(f"training text file {path} is empty")
    return docs


def token_stream(tok, texts: list[str], max_tokens: int | None = None) -> torch.Tensor:
    """All ``texts`` tokenised (no special tokens) and joined by the ids of a blank line."""
    sep = tok("\n\n", add_special_tokens=False)["input_ids"]
    out: list[int] = []
    chunk = 256
    for i in range(0, len(texts), chunk):
        enc = tok(texts[i:i + chunk], add_special_tokens=False, verbose=False)["input_ids"]
        for ids in enc:
            if out:
                out.extend(sep)
            out.extend(ids)
        if max_tokens is not None and len(out) >= max_tokens:
            out = out[:max_tokens]
            break
    return torch.tensor(out, dtype=torch.long)


def windows(stream: torch.Tensor, seq_len: int, bos_id: int | None) -> torch.Tensor:
    """Non-overlapping windows ``(n, seq_len [+1 with BOS])``; the trailing partial window is dropped."""
    n = stream.numel() // seq_len
    if n == 0:
        raise GeosteerError(f"training text has {stream.numel()} tokens, fewer than one window of "
                            f"seq_len={seq_len}")
    w = stream[: n * seq_len].view(n, seq_len)
    if bos_id is not None:
        w = torch.cat([torch.full((n, 1), bos_id, dtype=w.dtype), w], dim=1)
    return w


def fingerprint(w: torch.Tensor) -> str:
    """A short hash of the training windows (recorded in checkpoints: resuming on other data fails)."""
    return hashlib.sha256(w.numpy().tobytes()).hexdigest()[:16]


class BatchOrder:
    """Which windows step ``s`` uses, for a global batch of ``batch_size``; reshuffled every epoch."""

    def __init__(self, n_windows: int, batch_size: int, seed: int) -> None:
        if n_windows < 1:
            raise ValueError("no training windows")
        self.n, self.batch_size, self.seed = n_windows, batch_size, seed
        self._perms: dict[int, torch.Tensor] = {}

    def _perm(self, epoch: int) -> torch.Tensor:
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perms = {epoch: torch.randperm(self.n, generator=g)}
        return self._perms[epoch]

    def indices(self, step: int) -> torch.Tensor:
        start = step * self.batch_size
        idx = []
        while len(idx) < self.batch_size:
            pos = start + len(idx)
            epoch, off = divmod(pos, self.n)
            take = min(self.batch_size - len(idx), self.n - off)
            idx.extend(self._perm(epoch)[off:off + take].tolist())
        return torch.tensor(idx, dtype=torch.long)

    def shard(self, step: int, rank: int, world: int) -> torch.Tensor:
        """This process' part of step ``step``'s batch (contiguous, equal shares)."""
        idx = self.indices(step)
        per = self.batch_size // world
        return idx[rank * per:(rank + 1) * per]
