"""Which of vLLM's model runners the plugin follows, and the hooks that fill each step's recipe rows.

vLLM 0.32 has two model runners. Before every forward the plugin needs, in the step's batch order, each
request's ``extra_args`` (its recipe), its number of scheduled tokens and its prompt length
(:func:`geosteer_vllm.batch.set_rows`, :func:`geosteer_vllm.graph.write_rows`); each runner holds them in
its own place:

- **V1** (``vllm/v1/worker/gpu_model_runner.py``; the CPU build's runner inherits it): after
  ``_prepare_inputs``, ``input_batch.req_ids`` and the step's ``num_scheduled_tokens`` in batch order,
  ``requests[req_id].sampling_params.extra_args`` and ``.num_prompt_tokens`` (:func:`track_v1`).
- **V2** (``vllm/v1/worker/gpu/model_runner.py``; ``vllm/v1/worker/cpu/model_runner.py`` inherits it): the
  runner keeps no sampling parameters per request, so ``add_requests`` (each new request's
  ``sampling_params.extra_args``) is followed and ``_remove_request`` forgets them; ``prepare_inputs`` returns
  the step's ``InputBatch`` (``req_ids``, ``num_scheduled_tokens``, ``idx_mapping_np`` into
  ``req_states.prompt_len``) (:func:`track_v2`).

A steering engine must never run on a runner the plugin does not follow (its requests would be served as
the stock model): :func:`pin` picks V1 before an engine that steers is made, unless the user chose, and
:func:`check` refuses, where the steered model is built, any runner whose input preparation is not hooked;
the worker's start line names the runner (``geosteer: ...; vLLM's V1 model runner``).
"""

from __future__ import annotations

import functools
import os
import sys

from geosteer.errors import GeosteerError

ENV = "VLLM_USE_V2_MODEL_RUNNER"
HOOKED = "_geosteer"  # set on every runner method the plugin wraps


def pin(environ=None) -> str | None:
    """Before an engine that steers is made: ``VLLM_USE_V2_MODEL_RUNNER`` set to 0 where it was unset (vLLM
    would pick V2 wherever Triton is installed; V1 is the runner every serving test runs end to end), and
    then a note saying so (the worker's start line carries it, :func:`describe`); None where the user chose.
    A value that is not an integer, or V2 on a vLLM build without Triton, is refused in one line (vLLM would
    stop with a traceback)."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENV)
    if value is None:
        environ[ENV] = "0"
        return f"{ENV} was unset: geosteer set it to 0"
    try:
        v2 = bool(int(value.strip()))
    except ValueError:
        raise GeosteerError(f"{ENV} must be 0 (vLLM's V1 model runner) or 1 (its V2 runner); got "
                            f"'{value[:40]}'") from None
    if v2 and not _has_triton():
        raise GeosteerError(f"{ENV}={value.strip()}: vLLM's V2 model runner needs Triton, which this vLLM build "
                            f"does not have (vLLM's CPU build runs V1: unset {ENV} or set it to 0)")
    return None


def _has_triton() -> bool:
    try:
        from vllm.triton_utils import HAS_TRITON
    except ImportError:
        return True  # vLLM decides
    return bool(HAS_TRITON)


def describe(runner_kind: str, note: str | None) -> str:
    """The runner part of the worker's start line: ``vLLM's V1 model runner (note)``."""
    return f"vLLM's {runner_kind} model runner" + (f" ({note})" if note else "")


def hooked(cls) -> bool:
    """Whether the plugin fills the recipe rows of runner class ``cls`` (V1 or V2, or a subclass of either
    that keeps the hooked methods)."""
    if getattr(getattr(cls, "_prepare_inputs", None), HOOKED, False):
        return True
    return all(getattr(getattr(cls, m, None), HOOKED, False) for m in ("prepare_inputs", "add_requests",
                                                                        "_remove_request"))


def check(vllm_config, frame=None) -> str:
    """"V1" or "V2": the runner a steered model is built on (the one whose ``load_model`` is on the call stack
    from ``frame``, else the one ``vllm_config`` picks); a runner the plugin does not follow is refused, and so
    is a step the model runs in parts (the rows describe whole steps)."""
    split = _split_steps(vllm_config)
    if split:
        raise GeosteerError(f"geosteer cannot steer with {split}: the model then runs on parts of a step, whose "
                            "tokens would take other requests' recipe rows; start the server without it")
    runner = _building_runner(frame or sys._getframe(1))
    if runner is not None:
        if hooked(type(runner)):
            return "V1" if getattr(getattr(type(runner), "_prepare_inputs", None), HOOKED, False) else "V2"
        name = f"{type(runner).__module__}.{type(runner).__qualname__}"
    elif not getattr(vllm_config, "use_v2_model_runner", False):
        return "V1"
    elif track_v2():
        return "V2"
    else:
        name = "vLLM's V2 model runner"
    raise GeosteerError(f"geosteer cannot steer on {name} (its requests would be served as the stock model); "
                        f"start the server with {ENV}=0")


def _split_steps(vllm_config) -> str | None:
    """The vLLM option that runs the model on parts of a step (microbatches, prefill context parallelism) or
    moves its tokens between requests on the device (adaptive verification of drafts)."""
    par = getattr(vllm_config, "parallel_config", None)
    if getattr(par, "enable_dbo", False) or (getattr(par, "ubatch_size", 1) or 1) > 1:
        return "microbatches (--enable-dbo or --ubatch-size)"
    if (getattr(par, "prefill_context_parallel_size", 1) or 1) > 1:
        return "prefill context parallelism (--prefill-context-parallel-size)"
    if getattr(getattr(vllm_config, "speculative_config", None), "enable_adaptive_verification", False):
        return "adaptive verification of speculative drafts (enable_adaptive_verification)"
    return None


def _building_runner(frame):
    """The model runner whose ``load_model`` is on the stack above ``frame`` (None: none is)."""
    while frame is not None:
        if frame.f_code.co_name == "load_model":
            obj = frame.f_locals.get("self")
            if obj is not None and hasattr(obj, "execute_model"):
                return obj
        frame = frame.f_back
    return None


def track() -> None:
    """Hook both runners (idempotent)."""
    track_v1()
    track_v2()


def _mark(fn):
    setattr(fn, HOOKED, True)
    return fn


def fill(model, req_ids, counts, prompt_lens, extra_of) -> None:
    """This step's recipe rows and prompt lengths: ``req_ids`` in batch order, their scheduled tokens and
    prompt lengths, ``extra_of(req_id)`` their ``extra_args``."""
    from geosteer_vllm import batch, graph

    per_request = []
    for req_id, n, plen in zip(req_ids, counts, prompt_lens, strict=False):
        extra = extra_of(req_id) or {}
        per_request.append((batch.plan_or_stock(req_id, extra), int(n), int(plen), extra.get("geosteer_capture")))
    batch.set_rows(per_request)
    graph.write_rows(model, per_request)


def track_v1() -> None:
    """Wrap V1's ``GPUModelRunner._prepare_inputs`` (the CPU runner inherits it)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    orig = GPUModelRunner._prepare_inputs
    if getattr(orig, HOOKED, False):
        return

    @functools.wraps(orig)
    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens, *args, **kwargs):
        out = orig(self, scheduler_output, num_scheduled_tokens, *args, **kwargs)
        states = [self.requests.get(r) for r in self.input_batch.req_ids]
        extra = {r: getattr(getattr(s, "sampling_params", None), "extra_args", None)
                 for r, s in zip(self.input_batch.req_ids, states, strict=False)}
        fill(getattr(self, "model", None), self.input_batch.req_ids, num_scheduled_tokens.tolist(),
             [getattr(s, "num_prompt_tokens", 0) or 0 for s in states], extra.get)
        return out

    GPUModelRunner._prepare_inputs = _mark(_prepare_inputs)


def _extras(runner) -> dict:
    """{req_id: extra_args} of the requests a V2 runner holds (kept by the plugin: V2 keeps no sampling
    parameters per request)."""
    extras = runner.__dict__.get("_geosteer_extra")
    if extras is None:
        extras = runner.__dict__["_geosteer_extra"] = {}
    return extras


def fill_v2(runner, input_batch) -> None:
    """The rows of a V2 step from its ``InputBatch`` (batch order, scheduled tokens) and the runner's
    ``req_states`` (prompt lengths)."""
    from geosteer_vllm import batch

    n = input_batch.num_reqs
    counts = [int(c) for c in input_batch.num_scheduled_tokens[:n]]
    plens = runner.req_states.prompt_len.np[input_batch.idx_mapping_np[:n]].tolist()
    extra_of = _extras(runner).get
    if sum(counts) != input_batch.num_tokens:  # refused at start (check); rows that fit no token are none's
        batch.failed("the token rows of a step",
                     GeosteerError(f"{sum(counts)} scheduled tokens for {input_batch.num_tokens} in the batch"))
        extra_of = _none
    fill(getattr(runner, "model", None), input_batch.req_ids[:n], counts, plens, extra_of)


def _none(req_id):
    return None


def track_v2() -> bool:
    """Wrap V2's ``add_requests``, ``_remove_request`` and ``prepare_inputs`` (the CPU V2 runner inherits
    them); False where this vLLM has no V2 runner."""
    try:
        from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    except ImportError:
        return False
    if getattr(GPUModelRunner.prepare_inputs, HOOKED, False):
        return True
    add, remove, prepare = GPUModelRunner.add_requests, GPUModelRunner._remove_request, GPUModelRunner.prepare_inputs

    @functools.wraps(add)
    def add_requests(self, scheduler_output, *args, **kwargs):
        out = add(self, scheduler_output, *args, **kwargs)  # a streamed request is removed, then added again
        extras = _extras(self)
        for new in scheduler_output.scheduled_new_reqs:
            extras[new.req_id] = getattr(new.sampling_params, "extra_args", None)
        return out

    @functools.wraps(remove)
    def _remove_request(self, req_id, *args, **kwargs):
        _extras(self).pop(req_id, None)
        return remove(self, req_id, *args, **kwargs)

    @functools.wraps(prepare)
    def prepare_inputs(self, *args, **kwargs):
        input_batch = prepare(self, *args, **kwargs)
        fill_v2(self, input_batch)
        return input_batch

    GPUModelRunner.add_requests = _mark(add_requests)
    GPUModelRunner._remove_request = _mark(_remove_request)
    GPUModelRunner.prepare_inputs = _mark(prepare_inputs)
    return True
