"""The model families geosteer serves on vLLM: one row per Hugging Face ``model_type`` (the vLLM class it
extends and its architecture name); block parts come from ``models.anatomy.FAMILIES``. No vLLM import.
"""

from __future__ import annotations

from dataclasses import dataclass

from geosteer.errors import GeosteerError


@dataclass(frozen=True)
class ServedFamily:
    """A served family: the registered architecture and the vLLM class (``module:Class``) it extends."""

    architecture: str
    vllm_class: str


_MODELS = "vllm.model_executor.models"
SERVED_FAMILIES: dict[str, ServedFamily] = {
    "llama": ServedFamily("GeosteerLlamaForCausalLM", f"{_MODELS}.llama:LlamaForCausalLM"),
    "qwen2": ServedFamily("GeosteerQwen2ForCausalLM", f"{_MODELS}.qwen2:Qwen2ForCausalLM"),
    "qwen3": ServedFamily("GeosteerQwen3ForCausalLM", f"{_MODELS}.qwen3:Qwen3ForCausalLM"),
    "mistral": ServedFamily("GeosteerMistralForCausalLM", f"{_MODELS}.mistral:MistralForCausalLM"),
    "gemma3_text": ServedFamily("GeosteerGemma3ForCausalLM", f"{_MODELS}.gemma3:Gemma3ForCausalLM"),
}


def served_family(model_type: str, what: str = "this model") -> ServedFamily:
    """The row of ``model_type``, or a one-line error naming the supported families."""
    if model_type not in SERVED_FAMILIES:
        raise GeosteerError(f"geosteer serving supports the {', '.join(SERVED_FAMILIES)} families; {what} is "
                            f"'{model_type}'")
    return SERVED_FAMILIES[model_type]


def check_served_config(config, what: str = "this model") -> None:
    """Refuse, in one line, a configuration that vLLM's class for its family cannot serve as Hugging Face runs
    it: a Qwen2 with sliding windows on some layers only (vLLM's Qwen2 takes them on all layers or none)."""
    kinds = list(getattr(config, "layer_types", None) or [])
    if getattr(config, "model_type", None) == "qwen2" and len(set(kinds)) > 1:
        sliding = [i for i, k in enumerate(kinds) if k == "sliding_attention"]
        raise GeosteerError(f"{what} is a Qwen2 with sliding-window attention on layers {sliding} of "
                            f"{len(kinds)}; vLLM's Qwen2 takes sliding windows on all layers or none (set "
                            "use_sliding_window false, or one kind in layer_types, in its config.json)")
