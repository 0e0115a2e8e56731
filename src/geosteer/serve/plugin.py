"""The vLLM plugin (entry point ``vllm.general_plugins: geosteer = geosteer.serve.plugin:register``).

vLLM calls :func:`register` in every process it starts. It adds one architecture per served family
(``GeosteerLlamaForCausalLM``, ``GeosteerQwen3ForCausalLM``, …: ``serve.families``; chosen per engine
through ``hf_overrides``, so stock models are untouched) and wraps the model runner's input preparation so
each forward knows which recipe each token uses (:mod:`geosteer.serve.batch`). Safe to call more than once.
"""

from __future__ import annotations

import functools

from geosteer.serve.families import SERVED_FAMILIES


def register() -> None:
    from vllm import ModelRegistry

    known = ModelRegistry.get_supported_archs()
    for fam in SERVED_FAMILIES.values():
        if fam.architecture not in known:
            ModelRegistry.register_model(fam.architecture, f"geosteer.serve.models:{fam.architecture}")
    track_recipes()


def track_recipes() -> None:
    """Wrap ``GPUModelRunner._prepare_inputs`` (the CPU runner inherits it) to fill the recipe table."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    orig = GPUModelRunner._prepare_inputs
    if getattr(orig, "_geosteer", False):
        return

    @functools.wraps(orig)
    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens, *args, **kwargs):
        out = orig(self, scheduler_output, num_scheduled_tokens, *args, **kwargs)
        from geosteer.serve import batch

        per_request = []
        for req_id, n in zip(self.input_batch.req_ids, num_scheduled_tokens.tolist(), strict=False):
            state = self.requests.get(req_id)
            extra = getattr(getattr(state, "sampling_params", None), "extra_args", None) or {}
            per_request.append((batch.recipe_index(extra.get("geosteer_recipe")), int(n)))
        batch.set_rows(per_request)
        return out

    _prepare_inputs._geosteer = True
    GPUModelRunner._prepare_inputs = _prepare_inputs
