"""vLLM's causal-LM classes with geosteer recipes inside, one per served family (``serve.families``).

They build the stock model, then steer it with the config's ``geosteer_recipes`` through
:func:`geosteer_vllm.graph.install` (``geosteer_graph`` set) or :func:`geosteer_vllm.layers.install`.
"""

from __future__ import annotations

from vllm.logger import init_logger
from vllm.model_executor.models.gemma3 import Gemma3ForCausalLM
from vllm.model_executor.models.llama import LlamaForCausalLM
from vllm.model_executor.models.mistral import MistralForCausalLM
from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM
from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM

from geosteer_vllm import batch, graph, runners, tensor_parallel
from geosteer_vllm.inline import plan_inline
from geosteer_vllm.layers import install
from geosteer_vllm.plan import meta_model, plan_recipe

logger = init_logger("vllm.geosteer")  # vLLM's handler prints it beside its own lines


class SteeredCausalLM:
    """Mixin before a vLLM causal-LM class: the recipes are planned first (one-line errors), then
    installed on the built model; with ``geosteer_inline`` every layer can take inline recipes, with
    ``geosteer_capture_dir`` every layer can write captured activations there (``serve.capture``)."""

    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        runner = runners.check(vllm_config)  # never on a runner whose steps the plugin does not follow
        cfg = vllm_config.model_config.hf_config
        recipes = dict(getattr(cfg, "geosteer_recipes", None) or {})
        meta = meta_model(cfg)
        meta.config._geosteer_name = getattr(cfg, "geosteer_model_name", None)
        plans = [plan_recipe(name, folder, meta) for name, folder in recipes.items()]
        inline = bool(getattr(cfg, "geosteer_inline", False))
        captures = getattr(cfg, "geosteer_capture_dir", None)
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        tp, rank = vllm_config.parallel_config.tensor_parallel_size, 0
        if tp > 1:  # this rank's heads of the surfaces, walls and value scales; rank 0 alone writes captures
            from vllm.distributed import get_tensor_model_parallel_rank

            rank = get_tensor_model_parallel_rank()
            plans = [tensor_parallel.shard_plan(p, rank, tp, cfg.num_attention_heads) for p in plans]
            captures = captures if rank == 0 else None
        graph_on = bool(getattr(cfg, "geosteer_graph", False))
        if rank == 0:
            logger.info("geosteer: %d named recipe(s)%s; %s; %s", len(plans), ", inline recipes" if inline else "",
                        _where(cfg, vllm_config.model_config.enforce_eager),
                        runners.describe(runner, getattr(cfg, "geosteer_runner_note", None)))
        if graph_on:  # the steering runs from tables inside the compiled graph
            stages = graph.stages_of(plans, cfg.num_hidden_layers, inline)
            batch.set_recipes(plans, (lambda canon: _fitted(plan_inline(canon, meta), stages)) if inline else None)
            sched = vllm_config.scheduler_config
            sizes = vllm_config.compilation_config.cudagraph_capture_sizes or [0]
            graph.install(self, cfg.model_type, plans, stages, max(sched.max_num_batched_tokens, *sizes),
                          sched.max_num_seqs if inline else 0)
            return
        batch.set_recipes(plans, (lambda canon: plan_inline(canon, meta)) if inline else None)
        batch.set_capture_dir(captures)
        install(self, cfg.model_type, plans, every_layer=inline or bool(getattr(cfg, "geosteer_capture_dir", None)))


def _where(cfg, enforce_eager: bool) -> str:
    """Where the steering runs, for the log: in vLLM's compiled graph, or eager and why."""
    if not getattr(cfg, "geosteer_graph", False):
        return f"steering eager ({getattr(cfg, 'geosteer_eager', None) or 'geosteer_graph is off in hf_overrides'})"
    if enforce_eager:
        return "steering from the compiled path's tables, but vLLM runs eager (enforce_eager)"
    return "steering inside vLLM's compiled graph"


def _fitted(plan, stages: dict):
    graph.check_inline(plan, stages)
    return plan


class GeosteerLlamaForCausalLM(SteeredCausalLM, LlamaForCausalLM):
    """Llama (and SmolLM2) with geosteer recipes."""


class GeosteerQwen2ForCausalLM(SteeredCausalLM, Qwen2ForCausalLM):
    """Qwen2 with geosteer recipes."""


class GeosteerQwen3ForCausalLM(SteeredCausalLM, Qwen3ForCausalLM):
    """Qwen3 (q/k norms inside attention) with geosteer recipes."""


class GeosteerMistralForCausalLM(SteeredCausalLM, MistralForCausalLM):
    """Mistral (sliding window) with geosteer recipes."""


class GeosteerGemma3ForCausalLM(SteeredCausalLM, Gemma3ForCausalLM):
    """Gemma3 text models (sandwich norms, sliding windows) with geosteer recipes."""
