"""Tiny randomly initialised models, one per supported family, built offline from configs.

Used by the tests and for quick experiments. Each uses a real tokenizer (SmolLM2's, or GPT-2's for
gpt2) so that text goes in and out as with a real model. Shapes are chosen to exercise GQA, sliding
windows (with a short window so that it actually cuts), parallel residual and sandwich norms.
"""

from __future__ import annotations

import torch

from geosteer.models.tokenizers import gpt2_tokenizer, smollm2_tokenizer

_COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
               max_position_embeddings=512)

TINY_FAMILIES: dict[str, tuple[str, dict]] = {
    "llama": ("LlamaConfig", dict(_COMMON, num_key_value_heads=2, rope_theta=10000.0)),
    "qwen2": ("Qwen2Config", dict(_COMMON, num_key_value_heads=2, use_sliding_window=True, sliding_window=8,
                                  max_window_layers=1, layer_types=["full_attention", "sliding_attention",
                                                                    "sliding_attention"])),
    "qwen3": ("Qwen3Config", dict(_COMMON, num_key_value_heads=2, head_dim=16)),
    "mistral": ("MistralConfig", dict(_COMMON, num_key_value_heads=1, sliding_window=8)),
    "gemma3": ("Gemma3TextConfig", dict(_COMMON, num_key_value_heads=1, head_dim=32, sliding_window=8,
                                        layer_types=["sliding_attention", "sliding_attention",
                                                     "full_attention"], query_pre_attn_scalar=32)),
    "gpt2": ("GPT2Config", dict(n_embd=64, n_layer=3, n_head=4, n_positions=512)),
    "gpt_neox": ("GPTNeoXConfig", dict(_COMMON, use_parallel_residual=True, rotary_pct=0.5)),
}


def tiny_config(family: str, vocab_size: int):
    import transformers

    cls_name, kwargs = TINY_FAMILIES[family]
    cls = getattr(transformers, cls_name)
    cfg = cls(vocab_size=vocab_size, **kwargs)
    if family != "gpt2":
        cfg.tie_word_embeddings = family in ("gemma3",)
    return cfg


def tiny_model(family: str, seed: int = 0):
    """Return ``(model, tokenizer)`` for a tiny random ``family`` model (fp32, eval mode)."""
    from transformers import AutoModelForCausalLM

    tok = gpt2_tokenizer() if family == "gpt2" else smollm2_tokenizer()
    cfg = tiny_config(family, vocab_size=len(tok))
    if family != "gpt2":
        cfg.bos_token_id = tok.bos_token_id
        cfg.eos_token_id = tok.eos_token_id
        cfg.pad_token_id = tok.pad_token_id
    cfg._attn_implementation = "sdpa"
    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        # Random init is tiny (std 0.02); scale the weights up a little so attention is not uniform
        # and interventions have visible effects in tests.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 2 and "embed" not in name and "wte" not in name and "wpe" not in name:
                    p.mul_(4.0)
    model.config._geosteer_name = f"tiny-{family}"
    return model, tok
