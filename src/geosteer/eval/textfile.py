"""Reading and tokenising text files in bounded memory (``geosteer ppl --text-file``).

:func:`encode_file` reads in chunks, decodes UTF-8 incrementally and tokenises piece by piece, stopping at
``max_tokens``. Pieces are cut only at a single newline (or space) between non-space characters where the
text around the cut tokenises the same whole as in two parts, so the tokens equal tokenising the prefix at
once; only a stretch longer than ``_MAX_PENDING`` without such a cut is cut anyway.
"""

from __future__ import annotations

import codecs
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.models.tokenizers import adds_bos

CHUNK_BYTES = 1 << 16
_CHECK = 256  # characters each side of a cut that are re-tokenised to verify it
_MAX_SPACE_SCAN = 1 << 16  # look for a space cut only when this much text has no newline cut
_MAX_PENDING = 1 << 18  # characters kept uncut at most: beyond this, cut anyway (see module doc)
_FORCED_TRIES = 64  # positions tried for a checked cut in an over-long stretch


def _check_file(path: Path) -> None:
    if not path.exists():
        raise GeosteerError(f"text file not found: {path}")
    if not path.is_file():
        raise GeosteerError(f"not a file: {path}")


def check_text_file(path: str | Path, what: str = "text file", probe_bytes: int = 1 << 20) -> Path:
    """Refuse, before any model loads, a text file that is missing, not a file, blank, or not UTF-8 in its
    first ``probe_bytes`` (the rest is checked as it is read). Returns ``Path(path)``."""
    path = Path(path)
    if not path.exists():
        raise GeosteerError(f"{what} not found: {path}")
    if not path.is_file():
        raise GeosteerError(f"{what} is not a file: {path}")
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    try:
        with open(path, "rb") as f:
            head = f.read(probe_bytes)
            text = decoder.decode(head, final=len(head) < probe_bytes)
    except (OSError, UnicodeDecodeError) as e:
        raise GeosteerError(f"cannot read {what} {path} as UTF-8 text ({type(e).__name__})") from None
    if len(head) < probe_bytes and not text.strip():
        raise GeosteerError(f"{what} is empty: {path}")
    return path


def read_text_file(path: str | Path) -> str:
    """The whole file as text (UTF-8); one-line errors for a missing, unreadable or blank file."""
    path = Path(path)
    _check_file(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise GeosteerError(f"cannot read {path} as UTF-8 text ({type(e).__name__})") from None
    if not text.strip():
        raise GeosteerError(f"text file is empty: {path}")
    return text


def _ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False).input_ids) if text else []


def _cut_ok(tok, text: str, p: int) -> bool:
    a, b = max(0, p - _CHECK), min(len(text), p + _CHECK)
    return _ids(tok, text[a:b]) == _ids(tok, text[a:p]) + _ids(tok, text[p:b])


def _find_cut(tok, text: str) -> int:
    """The last safe cut position in ``text`` (0: none). Never within ``_CHECK`` chars of the end, so the
    local check sees the same right context that the whole text has."""
    end = len(text) - _CHECK
    pos = end
    while pos > 1:
        i = text.rfind("\n", 1, pos)
        if i < 1:
            break
        p = i + 1
        if p < end and not text[i - 1].isspace() and not text[p].isspace() and _cut_ok(tok, text, p):
            return p
        pos = i
    if len(text) < _MAX_SPACE_SCAN:
        return 0
    pos = end
    for _ in range(64):  # a few candidates only: a long line without any valid cut keeps accumulating
        i = text.rfind(" ", 1, pos)
        if i < 1 or i + 1 >= end:
            break
        if not text[i - 1].isspace() and not text[i + 1].isspace() and _cut_ok(tok, text, i):
            return i
        pos = i
    return 0


def _forced_cut(tok, text: str) -> int:
    """A cut for a stretch with no safe newline or space cut: the last position near the end (keeping
    ``_CHECK`` characters of right context) that passes the local check, else that position itself."""
    end = len(text) - _CHECK
    for p in range(end, max(1, end - _FORCED_TRIES), -1):
        if _cut_ok(tok, text, p):
            return p
    return end


def encode_file(tok, path: str | Path, max_tokens: int | None = None, add_bos: bool | None = None,
                chunk_bytes: int = CHUNK_BYTES) -> torch.Tensor:
    """Token ids of the UTF-8 file ``path`` (BOS first as :func:`geosteer.eval.perplexity.encode` puts it), the
    first ``max_tokens`` only when given, reading no more of the file than that needs (see module doc).

    Equal to ``geosteer.eval.perplexity.encode(tok, path.read_text())[:max_tokens]``.
    """
    path = Path(path)
    _check_file(path)

    add_bos = adds_bos(tok) if add_bos is None else add_bos
    bos = getattr(tok, "bos_token_id", None) if add_bos else None
    need = None if max_tokens is None else max_tokens - (1 if bos is not None else 0)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    parts: list[torch.Tensor] = []
    n = 0
    pending = ""
    seen_text = False
    try:
        with open(path, "rb") as f:
            while need is None or n < need:
                raw = f.read(chunk_bytes)
                final = not raw
                pending += decoder.decode(raw, final=final)
                if not final:
                    cut = _find_cut(tok, pending)
                    if cut == 0 and len(pending) >= _MAX_PENDING:
                        cut = _forced_cut(tok, pending)
                    if cut == 0:
                        continue
                    piece, pending = pending[:cut], pending[cut:]
                else:
                    piece, pending = pending, ""
                seen_text = seen_text or bool(piece.strip())
                ids = _ids(tok, piece)
                if need is not None:
                    ids = ids[: need - n]
                parts.append(torch.tensor(ids, dtype=torch.long))
                n += len(ids)
                if final:
                    break
    except (OSError, UnicodeDecodeError) as e:
        raise GeosteerError(f"cannot read {path} as UTF-8 text ({type(e).__name__})") from None
    if not seen_text and (need is None or n < need):  # the whole file was read: blank
        raise GeosteerError(f"text file is empty: {path}")
    ids = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
    if bos is not None and (len(ids) == 0 or int(ids[0]) != bos):
        ids = torch.cat([torch.tensor([bos]), ids])
    return ids if max_tokens is None else ids[:max_tokens]
