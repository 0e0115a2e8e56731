"""The split choices the paper leaves open, run both ways: the reference direction of the
radial/tangential FFN split — u = unit(x + A), the state the FFN reads (default), or u = unit(x), the block
input — and whether position 0 (BOS, whose residual norm dwarfs the rest) is ablated too or keeps its stock
update. Held-out loss of each FFN variant under each choice, on the same windows."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from geosteer.dynamics.parallel import mean_loss
from geosteer.dynamics.variants import REFERENCES, FFNVariant


@torch.no_grad()
def split_options_study(model: nn.Module, ids: torch.Tensor, layers: Sequence[int] | None,
                        variants: Sequence[str] = ("tangential", "radial"),
                        references: Sequence[str] = tuple(REFERENCES), batch_size: int = 4,
                        log=None) -> list[dict]:
    """Loss increase of each (variant, reference, BOS ablated or kept) over the stock loss."""

    base = mean_loss(model, ids, batch_size)
    rows = []
    for variant in variants:
        for ref in references:
            for skip in (False, True):
                iv = FFNVariant(variant, layers, reference=ref, skip_first=skip)
                loss = mean_loss(model, ids, batch_size, (iv,))
                rows.append({"variant": variant, "reference": ref, "bos": "kept stock" if skip else "ablated",
                             "loss": loss, "loss_increase": loss - base})
                if log:
                    log(f"{variant} u={ref} bos={'kept' if skip else 'ablated'}: dL {loss - base:+.3f}")
    return rows
