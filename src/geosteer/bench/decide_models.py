"""The models of ``geosteer bench decide``: the steered model, its fluency reader, their checks and cost factor.

The fluency reader scores the steered model's continuations, so it must come from another model family
(:data:`READER_BY_FAMILY` picks the default by the steered model's family). A family is the model type of the
model's config (``llama``, ``gemma3_text``, ``qwen2``…) cut to its leading letters (``llama``, ``gemma``,
``qwen``): SmolLM2 is a Llama. Both names are checked before any model loads (:func:`check_models`): an
unknown name, a missing file or folder, a bundled model that is not installed (the make target and the pip line
that install it are named) and a reader of the steered model's family are refused in one line.

The dry run's CPU-hour estimate is SmolLM2's (the committed run's measured costs) times the steered model's
:func:`cost_factor`: its measured stock forward time over SmolLM2's for the bundled models
(:data:`FORWARD_RATIO`), else the ratio of per-token multiply-adds read from its config.
"""

from __future__ import annotations

import re
from pathlib import Path

from geosteer.errors import GeosteerError

DEFAULT_MODEL = "smollm2"
# the steered model's family -> its default fluency reader; every other family: OTHER_READER
READER_BY_FAMILY = {"llama": "gemma3-270m", "gemma": "smollm2"}
OTHER_READER = "smollm2"
BUNDLED_FAMILY = {"smollm2": "llama", "gemma3-270m": "gemma", "qwen2.5-0.5b": "qwen", "qwen2.5-1.5b": "qwen"}
MAKE_TARGET = {"smollm2": "make setup", "gemma3-270m": "make gemma", "qwen2.5-0.5b": "make qwen-0.5b",
               "qwen2.5-1.5b": "make qwen-1.5b"}
# stock forward time of 512 tokens over SmolLM2's (fp32, one torch thread, CPU clock, median of 3):
# docs/results/benchmarks/speed_ladder.json, from `benchmarks/speed_ladder.py --threads 1 --clock cpu --repeats 3`
FORWARD_RATIO = {"smollm2": 1.0, "gemma3-270m": 2.21, "qwen2.5-0.5b": 3.21, "qwen2.5-1.5b": 9.49}
# SmolLM2-135M's shape (vocab, d_model, layers, heads, kv heads, head dim, MLP width) for the fallback ratio
SMOLLM2_SHAPE = (49152, 576, 30, 9, 3, 64, 1536)


def family_of_type(model_type: str) -> str:
    """A model type's family: its leading letters (``gemma3_text`` -> ``gemma``, ``qwen2`` -> ``qwen``)."""
    m = re.match(r"[a-z]+", str(model_type).lower())
    return m.group(0) if m else str(model_type).lower()


def _config_type(name: str) -> str | None:
    """The model type of ``name`` read without building weights (a folder's config.json, a GGUF header, the
    Hub cache); None when it cannot be read here."""
    p = Path(name).expanduser()
    if name.endswith(".gguf") and p.is_file():
        try:
            from gguf import GGUFReader

            field = GGUFReader(str(p)).fields.get("general.architecture")
            return bytes(field.parts[field.data[0]]).decode("utf-8") if field is not None else None
        except Exception:  # noqa: BLE001 - an unreadable header: the loader says what is wrong
            return None
    from geosteer.models.limits import config_of

    cfg = config_of(name)
    return getattr(cfg, "model_type", None) if cfg is not None else None


def family(name: str) -> str | None:
    """The family of the model ``name`` (module docstring); None when it cannot be told before it loads."""
    name = str(name)
    from geosteer.models.identity import same_model

    alias = next((a for a in BUNDLED_FAMILY if same_model(name, a)), None)  # an alias or its Hub id
    if alias is not None:
        return BUNDLED_FAMILY[alias]
    if name.startswith("tiny-"):
        return family_of_type(name[len("tiny-"):])
    model_type = _config_type(name)
    return family_of_type(model_type) if model_type else None


def default_reader(model: str) -> str:
    """The fluency reader of ``model`` when ``--reader`` is not given (:data:`READER_BY_FAMILY`)."""
    return READER_BY_FAMILY.get(family(model) or "", OTHER_READER)


def _not_installed(name: str) -> str:
    from geosteer.models.loading import BUNDLED

    b = BUNDLED[name]
    return (f"model '{name}' is not installed here ({b.missing_packages()}): run `{MAKE_TARGET[name]}` or "
            f"`{b.missing_hint()}`")


def check_name(name: str) -> None:
    """Refuse, in one line and before any model loads, a name that loads no model here: an unknown name or tiny
    family, a missing folder or ``.gguf`` file, a bundled model not installed (nor converted, nor in the Hub
    cache), a Hub id neither cached nor reachable."""
    from geosteer.models import loading

    p = Path(name).expanduser()
    unknown = (f"unknown model '{name}'; valid names: {', '.join(loading.known_names())}, a .gguf file, a local "
               "folder, or a hub id like org/model")
    if name in loading.BUNDLED:
        if not (loading._bundled_here(name) or loading._hub_cached(loading.HUB_IDS[name])):
            raise GeosteerError(_not_installed(name))
    elif name.startswith("tiny-"):
        if name not in loading.known_names():
            raise GeosteerError(unknown)
    elif name.endswith(".gguf"):
        loading._check_gguf(p)
    elif p.is_dir():
        if not (p / "config.json").is_file():
            raise GeosteerError(f"{name} is not a model folder (no config.json)")
        from geosteer.readers import ReadRefused, read_json

        try:  # a config the loader cannot read would stop every worker after the run began
            config = read_json(p / "config.json", what="the file")
        except ReadRefused as e:
            raise GeosteerError(f"{name} is not a model folder ({e})") from None
        if not isinstance(config, dict):
            raise GeosteerError(f"{name} is not a model folder (its config.json is not a JSON object)")
    elif name.startswith((".", "/", "~")) or p.exists() or "/" not in name:
        raise GeosteerError(unknown if "/" not in name else f"{name}: no such model folder or .gguf file")
    else:
        loading.check_hub_source(name)


def check_models(model: str, reader: str | None, installed: bool = True) -> str:
    """The fluency reader of ``model`` (``reader``, or the default by family), both checked before any model
    loads: names that load no model here (with ``installed``: also what is not installed), and a reader of the
    steered model's family, refused in one line."""
    from geosteer.models.loading import BUNDLED

    reader = default_reader(model) if reader is None else reader
    for name, role in ((model, "the steered model"), (reader, "the fluency reader")):
        if not name.strip():
            raise GeosteerError(f"{'--model' if role == 'the steered model' else '--reader'} is empty; give a model")
        try:
            if installed or name not in BUNDLED:
                check_name(name)
        except GeosteerError as e:
            raise GeosteerError(f"bench decide needs {role} '{name}': {e}") from None
    check_families(model, reader)
    return reader


def not_installed(model: str, reader: str) -> list[str]:
    """What the run would refuse that a dry run goes past: the steered model and the reader among the bundled
    models that are not installed here, each as the run's refusal words it (its make target and pip line)."""
    from geosteer.models.loading import BUNDLED

    lines = []
    for name, role in ((model, "the steered model"), (reader, "the fluency reader")):
        try:
            if name in BUNDLED:
                check_name(name)
        except GeosteerError as e:
            lines.append(f"bench decide needs {role} '{name}': {e}")
    return lines


def check_families(model: str, reader: str, model_family: str | None = None,
                   reader_family: str | None = None) -> None:
    """Refuse a reader of the steered model's family (families given, or read by :func:`family`)."""
    mine = model_family or family(model)
    theirs = reader_family or family(reader)
    if mine is not None and mine == theirs:
        raise GeosteerError(f"--reader {reader}: the fluency reader must be of another model family than the "
                            f"steered model {model} (both {mine}); give another --reader, e.g. "
                            f"{READER_BY_FAMILY.get(mine, OTHER_READER)}")


def _macs(vocab: int, d: int, layers: int, heads: int, kv: int, head_dim: int, ffn: int) -> float:
    """Multiply-adds per token of the linear layers: the LM head, and per layer q, k, v, o and a gated MLP."""
    return vocab * d + layers * (d * (2 * heads * head_dim + 2 * kv * head_dim) + 3 * d * ffn)


def config_macs(cfg) -> float | None:
    """:func:`_macs` from a transformers config (None when it lacks a field)."""
    cfg = cfg.get_text_config() if callable(getattr(cfg, "get_text_config", None)) else cfg
    try:
        heads = int(cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
        return _macs(int(cfg.vocab_size), int(cfg.hidden_size), int(cfg.num_hidden_layers), heads,
                     int(getattr(cfg, "num_key_value_heads", None) or heads), head_dim,
                     int(getattr(cfg, "intermediate_size", None) or 4 * cfg.hidden_size))
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return None


def cost_factor(model: str) -> tuple[float, str]:
    """(the steered model's cost over SmolLM2's, what it rests on): :data:`FORWARD_RATIO` for a bundled model,
    else its per-token multiply-adds over SmolLM2's from its config, else 1 (unknown)."""
    if model == "smollm2":
        return 1.0, "the committed run measured them on it"
    if model in FORWARD_RATIO:
        return FORWARD_RATIO[model], "its measured stock forward time over SmolLM2's (benchmarks/speed_ladder.py)"
    from geosteer.models.limits import config_of

    cfg = config_of(model) if not model.endswith(".gguf") else None
    macs = config_macs(cfg) if cfg is not None else None
    if macs:
        return round(macs / _macs(*SMOLLM2_SHAPE), 3), "its per-token multiply-adds over SmolLM2's, from its config"
    return 1.0, "unknown (its config is not readable before it loads): SmolLM2's cost"
