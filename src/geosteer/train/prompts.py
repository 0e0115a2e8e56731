"""Prompt sets for behaviour objectives: target / control files, their batches, a continuation's
teacher-forced log-prob and the controls' next-token KL against a reference.

Targets: a JSON list of ``{"prompt", "target"}`` (tokenised apart and joined); controls: a JSON list of
strings. Batches are right-padded, BOS first when ``add_bos`` says so (:func:`bos_first`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.io_utils import read_json


def read_targets(path: str | Path) -> list[dict]:
    """T.json: a non-empty JSON list of {"prompt": str, "target": str} (one-line errors otherwise)."""
    items = _read_list(path, "target file")
    out = []
    for i, it in enumerate(items):
        if not isinstance(it, dict) or not isinstance(it.get("prompt"), str) or not isinstance(
                it.get("target"), str):
            raise GeosteerError(f"{path}: item {i} must be an object with string 'prompt' and 'target'")
        if not it["prompt"].strip():
            raise GeosteerError(f"{path}: item {i} has an empty prompt")
        if not it["target"]:
            raise GeosteerError(f"{path}: item {i} has an empty target continuation")
        out.append({"prompt": it["prompt"], "target": it["target"]})
    return out


def read_controls(path: str | Path) -> list[str]:
    """C.json: a non-empty JSON list of prompt strings."""
    items = _read_list(path, "control file")
    for i, it in enumerate(items):
        if not isinstance(it, str) or not it.strip():
            raise GeosteerError(f"{path}: item {i} must be a non-empty prompt string")
    return list(items)


def _read_list(path, what: str) -> list:

    p = Path(path)
    doc = read_json(p, what)
    if not isinstance(doc, list):
        raise GeosteerError(f"{p}: the {what} must be a JSON list")
    if not doc:
        raise GeosteerError(f"{p}: the {what} is empty (need at least one prompt)")
    return doc


@dataclass
class Batch:
    """Right-padded token ids (n, T), BOS first or not (:func:`bos_first`); ``lengths`` (n,); ``target``
    (n, T) bool marks the positions whose next token is a target token (empty for control batches)."""

    ids: torch.Tensor
    lengths: torch.Tensor
    target: torch.Tensor | None = None
    target_ids: list[list[int]] | None = None


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False).input_ids


def bos_first(tok, add_bos: bool | None = True) -> bool:
    """Whether encoded prompts start with the tokenizer's BOS: ``add_bos=None`` as the tokenizer itself
    encodes text (its own ``add_bos_token`` convention, as generation and perplexity do by default);
    ``True``: BOS first; ``False``: never. Always False for a tokenizer without a BOS."""
    bos = getattr(tok, "bos_token_id", None)
    if bos is None or add_bos is False:
        return False
    if add_bos is None:
        ids = tok("a").input_ids
        return bool(ids) and ids[0] == bos
    return True


def _bos(tok, add_bos: bool | None) -> list[int]:
    return [tok.bos_token_id] if bos_first(tok, add_bos) else []


def encode_targets(tok, targets: list[dict], add_bos: bool | None = True) -> Batch:
    """Prompt and target tokenised apart and joined (the target's tokens are exactly what is suppressed);
    ``add_bos``: see :func:`bos_first` (default BOS first)."""
    bos = _bos(tok, add_bos)
    seqs, marks, tids = [], [], []
    for i, t in enumerate(targets):
        p, c = _ids(tok, t["prompt"]), _ids(tok, t["target"])
        if not c:
            raise GeosteerError(f"target {i} ({t['target']!r}) tokenises to nothing")
        if not p:
            raise GeosteerError(f"target prompt {i} tokenises to nothing")
        pre = bos + p
        seqs.append(pre + c)
        m = [False] * (len(pre) - 1) + [True] * len(c) + [False]  # position i predicts token i+1
        marks.append(m[: len(pre) + len(c)])
        tids.append(c)
    b = _pad(tok, seqs)
    tgt = torch.zeros_like(b.ids, dtype=torch.bool)
    for i, m in enumerate(marks):
        tgt[i, : len(m)] = torch.tensor(m)
    b.target, b.target_ids = tgt, tids
    return b


def encode_controls(tok, prompts: list[str], add_bos: bool | None = True) -> Batch:
    """Control prompts, each tokenised alone; ``add_bos``: see :func:`bos_first` (default BOS first)."""
    bos = _bos(tok, add_bos)
    seqs = []
    for i, p in enumerate(prompts):
        ids = _ids(tok, p)
        if not ids:
            raise GeosteerError(f"control prompt {i} tokenises to nothing")
        seqs.append(bos + ids)
    return _pad(tok, seqs)


def _pad(tok, seqs: list[list[int]]) -> Batch:
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), int(pad), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    return Batch(ids, torch.tensor([len(s) for s in seqs]))


def target_logprob(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """(n,) log-prob of each target continuation (sum over its tokens), teacher-forced.

    Right padding with a purely causal mask: real positions never see the pads, so no attention mask."""
    logp = torch.log_softmax(logits.float(), -1)[:, :-1]
    nxt = batch.ids[:, 1:].to(logits.device)
    tok_lp = logp.gather(-1, nxt.unsqueeze(-1)).squeeze(-1)
    return (tok_lp * batch.target[:, :-1].to(logits.device)).sum(-1)


def control_logprobs(logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs (n, T, V), valid (n, T) bool): next-token distributions at every real position."""
    logp = torch.log_softmax(logits.float(), -1)
    valid = torch.arange(batch.ids.shape[1])[None] < batch.lengths[:, None]
    return logp, valid.to(logits.device)


def control_kl(logp_ref: torch.Tensor, logp: torch.Tensor, valid: torch.Tensor, last_only: bool = False,
               lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Mean KL(P_ref ‖ P) over the valid positions (or only each prompt's last position)."""
    kl = (logp_ref.exp() * (logp_ref - logp)).sum(-1)
    if last_only:
        return kl[torch.arange(kl.shape[0]), (lengths - 1).to(kl.device)].mean()
    return (kl * valid).sum() / valid.sum()


# ----------------------------------------------------------------------------------------- soft walls
