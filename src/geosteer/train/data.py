"""Token windows for training and a seeded, resumable batch order.

Text is tokenised once, cut into ``seq_len`` windows with BOS in front; step s's batch is a pure function
of (seed, s) (:class:`WindowBatches`), so a resumed run sees the same batches. :class:`FullBatch`: the same
inputs at every step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from geosteer.data.corpus import SPLITS, split_texts
from geosteer.errors import GeosteerError
from geosteer.readers import ReadRefused, read_text

MAX_TEXT_BYTES = 1 << 30  # a training text file is read whole


def load_texts(source: str | Path | None = "train") -> list[str]:
    """Documents to train on: ``"train"``/``"heldout"`` (bundled corpus split) or a UTF-8 text file."""

    if source is None:
        source = "train"
    if isinstance(source, str) and source in SPLITS:
        return split_texts(source)
    path = Path(source)
    if not path.exists() and not path.is_symlink():
        raise GeosteerError(f"training text '{source}' is neither a corpus split ({', '.join(SPLITS)}) "
                            "nor a readable text file")
    try:
        text = read_text(path, what="training text", limit=MAX_TEXT_BYTES)
    except ReadRefused as e:
        raise GeosteerError(f"{e} (a corpus split: {', '.join(SPLITS)})") from None
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


def prepare_windows(tok, text: str | Path | None, train_ids: torch.Tensor | None, seq_len: int) -> torch.Tensor:
    """The training windows: ``train_ids`` as given (2-D) or cut into windows (1-D), else ``text`` tokenised."""
    if train_ids is not None:
        if train_ids.dim() == 2:
            return train_ids.long()
        bos = getattr(tok, "bos_token_id", None) if tok is not None else None
        return windows(train_ids.long(), seq_len, bos)
    if tok is None:
        raise GeosteerError("train() needs a tokenizer (tok=...) or pre-tokenised train_ids")
    return windows(token_stream(tok, load_texts(text)), seq_len, getattr(tok, "bos_token_id", None))


class WindowBatches:
    """Token windows in the seeded order of :class:`BatchOrder` (the language-modelling data of a run)."""

    def __init__(self, w: torch.Tensor, batch_size: int, seed: int) -> None:
        self.windows = w
        self.order = BatchOrder(w.shape[0], batch_size, seed)
        self.fingerprint = fingerprint(w)
        self.tokens_per_step = batch_size * (w.shape[1] - 1)

    def batch(self, step: int, rank: int, world: int, device) -> torch.Tensor:
        return self.windows[self.order.shard(step, rank, world)].to(device)

    def chunks(self, batch: torch.Tensor, micro_batch: int | None) -> Iterator[tuple[torch.Tensor, float]]:
        """Micro-batches of ``batch`` with their share of it (gradient accumulation)."""
        for chunk in batch.split(micro_batch or batch.shape[0]):
            yield chunk, chunk.shape[0] / batch.shape[0]


@dataclass(frozen=True)
class StepBatch:
    """What a full-batch loss function gets: the step (0-based) and the run's inputs."""

    step: int
    inputs: Any


@dataclass(frozen=True)
class FullBatch:
    """The same inputs at every step (full-batch training on prompt sets; a run is fixed by its inputs).

    ``fingerprint`` ties checkpoints to the inputs; ``tokens_per_step`` is what one step reads. Every process
    gets all the inputs (their averaged gradients are the one-process gradients)."""

    inputs: Any
    fingerprint: str
    tokens_per_step: int

    def batch(self, step: int, rank: int, world: int, device) -> StepBatch:
        return StepBatch(step, self.inputs)

    def chunks(self, batch: StepBatch, micro_batch: int | None) -> Iterator[tuple[StepBatch, float]]:
        yield batch, 1.0
