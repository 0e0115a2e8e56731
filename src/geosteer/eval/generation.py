"""Greedy and seeded sampling generation (KV cache on), under whatever interventions are active."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from geosteer.errors import GeosteerError


@dataclass
class GenerationResult:
    prompt: str
    text: str  # the continuation only
    token_ids: list[int] = field(default_factory=list)  # continuation token ids
    greedy: bool = True
    seed: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def prompt_ids(tok, prompt: str, add_bos: bool = True) -> torch.Tensor:
    if not prompt:
        raise GeosteerError("prompt is empty")
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    bos = getattr(tok, "bos_token_id", None)
    if add_bos and bos is not None and ids[0, 0].item() != bos:
        ids = torch.cat([torch.tensor([[bos]]), ids], dim=1)
    return ids


@torch.no_grad()
def generate(
    model,
    tok,
    prompt: str,
    max_new_tokens: int = 50,
    greedy: bool = True,
    temperature: float = 1.0,
    top_k: int = 50,
    seed: int = 0,
    add_bos: bool = True,
) -> GenerationResult:
    """Continue ``prompt``. Sampling is reproducible: the seed fixes torch's RNG for this call only."""
    if max_new_tokens < 1:
        raise GeosteerError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
    if not greedy and temperature <= 0:
        raise GeosteerError(f"temperature must be > 0 (got {temperature}); use greedy decoding instead")
    device = next(model.parameters()).device
    ids = prompt_ids(tok, prompt, add_bos).to(device)
    kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, use_cache=True,
                  attention_mask=torch.ones_like(ids))
    if greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(do_sample=True, temperature=temperature, top_k=top_k, top_p=None)
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(seed)
        out = model.generate(ids, **kwargs)
    new = out[0, ids.shape[1]:].tolist()
    return GenerationResult(prompt=prompt, text=tok.decode(new, skip_special_tokens=True), token_ids=new,
                            greedy=greedy, seed=None if greedy else seed)
