"""Serving geosteer recipes on vLLM: a plugin with steered model classes, offline ``steered_llm`` and the
``geosteer serve`` OpenAI-compatible server (docs/serving.md). Needs vLLM (``make serve``)."""

from geosteer_vllm.engine import activations, engine_args, sampling, steered_llm

__all__ = ["activations", "engine_args", "sampling", "steered_llm"]
