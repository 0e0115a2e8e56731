"""Offline steered generation on vLLM: ``steered_llm(model, recipes)`` -> ``vllm.LLM``.

    llm = steered_llm("smollm2", {"calm": "artifacts/smollm2-surfaces-all"})
    llm.generate([{"prompt_token_ids": ids}], sampling("calm", max_tokens=32))

Every recipe is checked before vLLM starts; each keeps its own prefix-cache salt; the engine stays on the
compiled path when every recipe has a graph form, else runs eager (``geosteer_eager`` says why). Run it
under ``if __name__ == "__main__":`` (vLLM spawns its workers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from geosteer.errors import GeosteerError
from geosteer_vllm.batch import RECIPE_FIELD, SPEC_FIELD
from geosteer_vllm.families import check_served_config, served_family
from geosteer_vllm.inline import Policy, check_artifacts


def resolve_model(model: str) -> tuple[str, str]:
    """(folder vLLM loads, the name recipes are checked against) for a geosteer alias or a model folder."""
    from geosteer.models.loading import BUNDLED, cached_folder

    if model in BUNDLED:
        return str(cached_folder(model)), model
    if model.startswith("tiny-"):
        raise GeosteerError(f"'{model}' is built in memory; save it with save_pretrained and serve the folder")
    if not (Path(model) / "config.json").is_file():
        raise GeosteerError(f"model not found: {model} (a geosteer alias: {', '.join(BUNDLED)}, or a Hugging Face "
                            "model folder with config.json)")
    return str(Path(model).resolve()), str(Path(model).resolve())


CAPTURE_EAGER = "--max-capture: captured activations are written to files by Python at every step"


def check_recipes(folder: str, name: str, recipes: dict[str, str], tensor_parallel_size: int = 1,
                  inline: Policy | None = None, eager: str | None = None) -> tuple[str | None, str | None]:
    """Build every recipe on a weightless copy of the model: what vLLM's workers will do, but here; then
    admit requests for them (``serve.admission``; with ``inline``, inline recipes under that policy too).
    Returns (the key of the compiled graph's layout, None) when the steering runs inside vLLM's compiled
    graph (``serve.graph``: every recipe can), else (None, why the engine runs eager); ``eager``: a reason
    to run eager whatever the recipes."""
    from transformers import AutoConfig

    from geosteer_vllm import admission, graph
    from geosteer_vllm.plan import meta_model, plan_recipe

    meta = meta_model(AutoConfig.from_pretrained(folder))
    meta.config._geosteer_name = name
    plans = {}
    for rname, rfolder in recipes.items():
        plans[rname] = plan_recipe(rname, rfolder, meta)
    if inline is not None:
        check_artifacts(inline, meta)
    if meta.config.num_attention_heads % tensor_parallel_size:  # each rank takes whole heads (serve.tensor_parallel)
        raise GeosteerError(f"{meta.config.num_attention_heads} attention heads do not split over "
                            f"tensor_parallel_size={tensor_parallel_size}")
    why = eager or eager_reason(plans)
    stages = graph.stages_of(list(plans.values()), meta.config.num_hidden_layers, inline is not None)
    admission.configure(plans, meta if inline is not None else None, inline, stages if why is None else None)
    return (None, why) if why else (graph.layout_key(list(plans.values()), stages, inline is not None), None)


def eager_reason(plans: dict) -> str | None:
    """Why recipes ({name: RecipePlan}) make the engine run eager; None: they all run in the compiled graph."""
    from geosteer_vllm import graph

    attention = any(p.attention_layers for p in plans.values()) and graph.attention_in_graph()
    for rname, plan in plans.items():
        why = graph.why_not(plan, attention)
        if why is not None:
            where = "" if attention or not plan.attention_layers else (
                " (in the graph only on vLLM's CPU build, float32, with geosteer's compiled CPU kernels built)")
            return f"recipe '{rname}': {why}{where}"
    return None


def engine_args(model: str, recipes: dict[str, str] | None = None, tensor_parallel_size: int = 1,
                inline: Policy | None = None, max_capture: int | None = None) -> dict[str, Any]:
    """The ``vllm.LLM`` / engine keyword arguments that load ``model`` with ``recipes`` ({name: folder});
    ``inline``: also take inline recipes (objects of recipe keys) under that policy; ``max_capture``: return
    activations (``serve.capture``), at most that many values per request."""
    from transformers import AutoConfig

    folder, name = resolve_model(model)
    config = AutoConfig.from_pretrained(folder)
    check_served_config(config, f"'{model}'")
    kw: dict[str, Any] = {"model": folder, "dtype": "float32"}
    if max_capture is not None and max_capture < 1:
        raise GeosteerError(f"--max-capture must be a positive number of values (got {max_capture})")
    if recipes or inline is not None or max_capture:
        family = served_family(config.model_type, f"'{model}'")
        # compiled (serve.graph) when every recipe runs in the graph; else eager: walls, the channel layout,
        # attention operations on a GPU and captures pick their requests' rows in Python per step, which a
        # graph captured once per batch shape would freeze. Prefix caching stays on (each recipe's own salt)
        layout, why = check_recipes(folder, name, dict(recipes or {}), tensor_parallel_size, inline,
                                    eager=CAPTURE_EAGER if max_capture else None)
        from geosteer_vllm.runners import pin

        note = pin()  # a model runner whose steps the plugin follows, chosen before vLLM chooses (serve.runners)
        kw["hf_overrides"] = {"architectures": [family.architecture], "geosteer_recipes": dict(recipes or {}),
                              "geosteer_model_name": name, "geosteer_inline": inline is not None,
                              "geosteer_graph": layout is not None, "geosteer_eager": why}
        if note:
            kw["hf_overrides"]["geosteer_runner_note"] = note
        if layout is None:
            kw["enforce_eager"] = True
        else:  # vLLM's compile cache ignores hf_overrides: the steering layout goes into its key this way
            kw["additional_config"] = {"geosteer_graph": layout}
        if max_capture:
            from geosteer_vllm import admission
            from geosteer_vllm.capture import capture_dir

            kw["hf_overrides"].update(geosteer_capture_dir=capture_dir(), geosteer_capture_limit=int(max_capture))
            admission.set_capture(kw["hf_overrides"]["geosteer_capture_dir"], config.num_hidden_layers,
                                  config.hidden_size)
    return kw


def steered_llm(model: str, recipes: dict[str, str] | None = None, inline: Policy | None = None,
                max_capture: int | None = None, **llm_kwargs):
    """A ``vllm.LLM`` serving ``model`` and the named ``recipes`` (and inline recipes under ``inline``,
    activations of at most ``max_capture`` values per request); ``llm_kwargs`` go to ``LLM`` unchanged."""
    from vllm import LLM

    tp = int(llm_kwargs.get("tensor_parallel_size") or 1)
    return LLM(**{**engine_args(model, recipes, tp, inline, max_capture), **llm_kwargs})


def tensor_parallel_size(extra: list[str]) -> int:
    """The ``--tensor-parallel-size`` / ``-tp`` among vLLM server arguments (1 when absent)."""
    value = "1"
    for i, arg in enumerate(extra):
        flag, sep, rest = arg.partition("=")
        if flag in ("--tensor-parallel-size", "-tp"):
            value = rest if sep else (extra[i + 1] if i + 1 < len(extra) else "")
    if not value.isdigit() or int(value) < 1:
        raise GeosteerError(f"--tensor-parallel-size needs a positive integer (got '{value}')")
    return int(value)


def sampling(recipe: str | dict | None = None, capture: dict | None = None, **kwargs):
    """``vllm.SamplingParams(**kwargs)`` for requests steered by ``recipe``: a recipe's name, an object of
    recipe keys (an inline recipe, admitted here), or None (the stock model). ``capture``: a
    ``geosteer_capture`` object (``serve.capture``; read the result with :func:`activations`)."""
    from vllm import SamplingParams

    from geosteer_vllm import admission

    extra = dict(kwargs.pop("extra_args", None) or {})
    if capture is not None:
        extra["geosteer_capture"] = admission.issue_capture(capture)
    if isinstance(recipe, dict):
        extra[SPEC_FIELD] = admission.admit(recipe)
    elif recipe:
        extra[RECIPE_FIELD] = recipe
    return SamplingParams(extra_args=extra or None, **kwargs)


def activations(params, output) -> dict[str, list[list[float]]]:
    """The captured activations of a finished request (``params`` from :func:`sampling` with ``capture``,
    ``output`` the ``RequestOutput``): {"L": [[values] per token]} (``serve.capture``)."""
    from geosteer_vllm import admission

    cap = params.extra_args["geosteer_capture"]
    n = len(output.prompt_token_ids) + (len(output.outputs[0].token_ids) - 1 if cap["positions"] == "all" else 0)
    return admission.collect_capture(cap, n)
