"""A model's limits — positions, layers, heads and vocabulary — from the loaded model or from its config alone.

The CLI checks options against :func:`config_of` (no weights are built) before it loads a model; library
functions that build windows check the loaded model with :func:`check_positions`. Both refuse in one line.
"""

from __future__ import annotations

from pathlib import Path

from geosteer.cache import cache_dir
from geosteer.errors import GeosteerError
from geosteer.models.loading import BUNDLED, HUB_IDS
from geosteer.models.tiny import TINY_FAMILIES, tiny_config


def _text_config(config):
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def config_of(name: str):
    """The ``transformers`` config of the model ``name`` (as :func:`geosteer.load_model` names it), read
    without building weights; ``None`` when that needs the model itself (a GGUF file, an uncached Hub id)."""

    name = str(name)
    if name.startswith("tiny-"):
        family = name[len("tiny-"):]
        return tiny_config(family, vocab_size=1 << 16) if family in TINY_FAMILIES else None
    if name in BUNDLED:
        folder = cache_dir() / name
        return _auto_config(str(folder)) if (folder / "config.json").is_file() else _auto_config(HUB_IDS[name])
    if name.endswith(".gguf") or (Path(name).exists() and not Path(name).is_dir()):
        return None
    return _auto_config(name)


def _auto_config(source: str):
    from transformers import AutoConfig

    local = Path(source).is_dir()
    if not local and "/" not in source:
        return None
    try:
        return AutoConfig.from_pretrained(source, local_files_only=True)
    except Exception:  # noqa: BLE001 - not a model folder / not cached: the loader says what is wrong
        return None


def _config_int(model_or_config, keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` that the (text) config holds as a positive integer; ``None`` when none does."""
    cfg = _text_config(getattr(model_or_config, "config", model_or_config))
    for key in keys:
        value = getattr(cfg, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def max_positions(model_or_config) -> int | None:
    """The number of positions the model was built for (``max_position_embeddings``, GPT-2's ``n_positions``)."""
    return _config_int(model_or_config, ("max_position_embeddings", "n_positions", "max_sequence_length",
                                         "seq_length"))


def num_layers(model_or_config) -> int | None:
    """The number of transformer blocks named in the config."""
    return _config_int(model_or_config, ("num_hidden_layers", "n_layer", "num_layers"))


def num_heads(model_or_config) -> int | None:
    """The number of query heads per layer named in the config."""
    return _config_int(model_or_config, ("num_attention_heads", "n_head", "num_heads"))


def vocab_size(model_or_config) -> int | None:
    """The number of token ids the model scores (``vocab_size``)."""
    return _config_int(model_or_config, ("vocab_size",))


def check_positions(model_or_config, length: int, what: str = "sequence length") -> None:
    """Refuse a window of ``length`` tokens that is longer than the model's positions (one line naming
    ``what``, the length and the limit); models whose config names no limit pass."""
    limit = max_positions(model_or_config) if model_or_config is not None else None
    if limit is not None and length > limit:
        raise GeosteerError(f"{what} {length} is longer than the model's {limit} positions "
                            f"(max_position_embeddings); use at most {limit}")
