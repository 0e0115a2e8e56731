"""The guard on learned position tables (GPT-2's ``wpe``, OPT's ``embed_positions``): :func:`guard_positions`
(run by :func:`geosteer.load_model`) turns a forward past the model's positions, whatever its path, into one
:class:`~geosteer.errors.GeosteerError` naming the limit instead of an ``IndexError``.
"""

from __future__ import annotations

import torch

from geosteer.errors import GeosteerError

#: Module names of the learned position tables (GPT-2 ``wpe``, OPT/BioGPT ``embed_positions``,
#: BERT-style ``position_embeddings``).
POSITION_TABLES = ("wpe", "embed_positions", "position_embeddings")


def _check(table: torch.nn.Embedding, args) -> None:
    ids = args[0] if args else None
    if not isinstance(ids, torch.Tensor) or ids.numel() == 0 or torch.compiler.is_compiling():
        return
    top = int(ids.max())
    if top >= table.num_embeddings:
        n = table.geosteer_positions
        need = top + 1 - (table.num_embeddings - n)
        raise GeosteerError(f"the input needs {need} positions (prompt, text and generated tokens together), "
                            f"more than the model's {n} learned positions (n_positions / "
                            f"max_position_embeddings); shorten it to at most {n} tokens")


def guard_positions(model) -> int:
    """Refuse, in one line, any forward past ``model``'s learned position tables (a pre-hook on each;
    idempotent). Returns how many tables are guarded (0 for rotary families)."""
    config = getattr(model, "config", None)
    get_text = getattr(config, "get_text_config", None)
    config = get_text() if callable(get_text) else config
    limit = getattr(config, "max_position_embeddings", None)
    guarded = 0
    for name, module in model.named_modules():
        if not (isinstance(module, torch.nn.Embedding) and name.rsplit(".", 1)[-1] in POSITION_TABLES):
            continue
        if not getattr(module, "geosteer_positions", None):
            # OPT's table has two extra rows (an offset): the user-facing count is the config's.
            ok = isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit <= module.num_embeddings
            module.geosteer_positions = limit if ok else module.num_embeddings
            module.register_forward_pre_hook(_check)
        guarded += 1
    return guarded
