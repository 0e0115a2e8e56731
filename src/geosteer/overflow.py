"""Numbers that cannot silently overflow: finite logits before decoding, finite forwards at load.

Huge but finite parameters overflow inside the forward. :func:`check_logits` (and :class:`FiniteLogits` for
``generate``) refuses non-finite logits in one line; :func:`check_forward_finite` probes a forward with an
intervention at load and refuses it when the output is not finite while the stock model's is.
"""

from __future__ import annotations

import torch

from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.models.loading import input_device

PROBE_TOKENS = 8


class NonFiniteLogits(GeosteerError):
    """The model's logits hold NaN or +inf, or a row is all -inf or constant: nothing can be decoded from them."""


def logits_ok(logits: torch.Tensor) -> bool:
    """No NaN, no +inf, every row has a finite maximum (-inf entries are masked tokens, allowed), and no row
    of more than one entry is constant: a residual stream that overflowed comes out of the final norm as
    all-zero logits (x · rsqrt(inf) = 0), which would decode as token 0."""
    x = logits.detach()
    if not x.numel():
        return True
    if bool(torch.isnan(x).any()) or bool(torch.isposinf(x).any()):
        return False
    top = x.amax(-1)
    if not bool(torch.isfinite(top).all()):
        return False
    return x.shape[-1] < 2 or not bool((top == x.amin(-1)).any())


def check_logits(logits: torch.Tensor, what: str = "the model") -> None:
    if not logits_ok(logits):
        raise NonFiniteLogits(f"{what} produced non-finite logits (NaN, infinite or all equal: an intervention "
                              "or its numbers overflow); nothing was decoded")


class FiniteLogits:
    """An HF ``LogitsProcessor`` that refuses non-finite scores before a token is chosen."""

    def __init__(self, what: str = "the model") -> None:
        self.what = what

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        check_logits(scores, self.what)
        return scores


def _probe_logits(model) -> torch.Tensor:

    vocab = int(getattr(model.config, "vocab_size", 0) or 2)
    ids = (torch.arange(PROBE_TOKENS) * 7919 + 1) % max(vocab, 2)
    return model(input_ids=ids[None].to(input_device(model)), use_cache=False).logits


@torch.no_grad()
def probe_ok(model) -> bool:
    """Whether a probe forward through ``model``, with whatever is attached now, gives usable logits."""
    return logits_ok(_probe_logits(model))


def overflow_error(source: str) -> GeosteerError:
    return GeosteerError(f"{source}: its numbers overflow the model's forward (non-finite logits on a probe "
                         f"input of {PROBE_TOKENS} tokens, finite without it); it was not loaded")


@torch.no_grad()
def check_forward_finite(model, intervention, source: str) -> None:
    """Refuse ``intervention`` (with ``attach(model)``) when a probe forward through ``model`` with it attached
    gives non-finite logits while the stock model's are finite. Skipped for models on the meta device and
    when ``intervention`` cannot be attached next to what the model carries (e.g. surfaces on a model that
    has a bank installed, as in the studio, which probes its own way); generation still checks the logits."""

    if any(p.is_meta for p in model.parameters()):
        return
    was_training = model.training
    model.eval()
    try:
        try:
            remove = intervention.attach(model)
        except GeosteerError:
            return
        remove()
        with steer(model, intervention):
            steered = _probe_logits(model)
        if logits_ok(steered) or not logits_ok(_probe_logits(model)):
            return
    finally:
        model.train(was_training)
    raise overflow_error(source)
