"""The vLLM plugin (entry point ``vllm.general_plugins: geosteer = geosteer_vllm.plugin:register``).

:func:`register` (in every vLLM process, idempotent) adds one architecture per served family, wraps the
input processor (:func:`geosteer_vllm.admission.check`, prefix-cache salt) and the model runners' input
preparation (:mod:`geosteer_vllm.runners`, :mod:`geosteer_vllm.batch`).
"""

from __future__ import annotations

import functools

from geosteer_vllm.families import SERVED_FAMILIES


def register() -> None:
    from vllm import ModelRegistry

    known = ModelRegistry.get_supported_archs()
    for fam in SERVED_FAMILIES.values():
        if fam.architecture not in known:
            ModelRegistry.register_model(fam.architecture, f"geosteer_vllm.models:{fam.architecture}")
    guard_requests()
    track_recipes()


def guard_requests() -> None:
    """Wrap ``InputProcessor.process_inputs``: the recipe and capture checks (``VLLMValidationError``: a 400
    from the OpenAI server) before the request is made, and the recipe's cache salt on the request made."""
    from vllm.v1.engine.input_processor import InputProcessor

    orig = InputProcessor.process_inputs
    if getattr(orig, "_geosteer", False):
        return

    @functools.wraps(orig)
    def process_inputs(self, request_id, prompt, params, *args, **kwargs):
        from geosteer.errors import GeosteerError
        from geosteer_vllm import admission, capture

        extra = getattr(params, "extra_args", None)
        if not extra or not any(k.startswith("geosteer_") for k in extra):
            return orig(self, request_id, prompt, params, *args, **kwargs)
        cfg = self.model_config.hf_config
        names = list(getattr(cfg, "geosteer_recipes", None) or {})
        try:
            plan = admission.check(extra, names)
        except GeosteerError as e:
            from vllm.exceptions import VLLMValidationError

            raise VLLMValidationError(str(e), parameter="geosteer_recipe") from None
        req = orig(self, request_id, prompt, params, *args, **kwargs)
        n = len(req.prompt_token_ids or ())
        req.cache_salt = admission.salt(plan, n, req.cache_salt)
        if capture.FIELD in extra:
            try:
                if not getattr(cfg, "geosteer_capture_dir", None):
                    raise GeosteerError("this server does not capture activations (start it with --max-capture)")
                limit = int(getattr(cfg, "geosteer_capture_limit", 0) or 0)
                max_tokens = params.max_tokens or max(self.model_config.max_model_len - n, 0)
                cap = capture.admit(extra[capture.FIELD], n, max_tokens, cfg.hidden_size, limit)
            except GeosteerError as e:
                from vllm.exceptions import VLLMValidationError

                raise VLLMValidationError(str(e), parameter=capture.FIELD) from None
            for p in {id(x): x for x in (params, getattr(req, "sampling_params", None)) if x is not None}.values():
                if p.extra_args is not None:
                    p.extra_args[capture.FIELD] = cap  # the engine's layers read the object
            req.cache_salt = f"geosteer-capture-{cap['token']}"  # its prefix is computed, never read from the cache
        return req

    process_inputs._geosteer = True
    InputProcessor.process_inputs = process_inputs


def track_recipes() -> None:
    """Hook the model runners' input preparation to fill each step's recipe rows (:mod:`geosteer_vllm.runners`:
    V1's ``_prepare_inputs``, V2's ``add_requests``/``prepare_inputs``)."""
    from geosteer_vllm import runners

    runners.track()
