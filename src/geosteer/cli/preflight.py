"""What the CLI can check of a model before its weights load: its tokenizer (vendored for the tiny models, read
from a folder, the bundled model's cache or the local Hub cache), so that a prompt longer than the model's
positions is refused in one line before any model is built.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from geosteer.errors import GeosteerError


@lru_cache(maxsize=4)
def tokenizer_of(model: str):
    """The tokenizer of ``--model`` without its weights; ``None`` where that needs the model (a GGUF file, a Hub
    id not in the local cache, a bundled model not yet converted)."""
    from geosteer.models.tokenizers import gpt2_tokenizer, smollm2_tokenizer

    name = str(model)
    if name.startswith("tiny-"):
        return gpt2_tokenizer() if name == "tiny-gpt2" else smollm2_tokenizer()
    from geosteer.cache import cache_dir
    from geosteer.models.identity import HUB_IDS

    if name in HUB_IDS:
        folder = cache_dir() / name
        source = str(folder) if (folder / "tokenizer_config.json").is_file() else HUB_IDS[name]
    elif name.endswith(".gguf") or (Path(name).exists() and not Path(name).is_dir()):
        return None
    else:
        source = name
    if not Path(source).is_dir() and "/" not in source:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(source, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached or not a model folder: the loader says what is wrong later
        return None


def check_prompt_positions(tok, config, prompts: Iterable[str], what: str, *, special_tokens: bool = True,
                           extra: int = 0) -> None:
    """Refuse, in one line, the first of ``prompts`` whose tokens (plus ``extra`` generated ones) do not fit the
    positions of ``config`` (a model or its config); nothing is checked when either is unknown."""
    from geosteer.models.limits import max_positions

    limit = max_positions(config) if config is not None else None
    if tok is None or limit is None:
        return
    texts = list(prompts)
    for i, text in enumerate(texts):
        n = len(tok(text, add_special_tokens=special_tokens)["input_ids"]) + extra
        if n > limit:
            which = what if len(texts) == 1 else f"{what} {i + 1}"
            raise GeosteerError(f"{which} is {n} tokens, longer than the model's {limit} positions "
                                f"(max_position_embeddings); shorten it to at most {limit - extra} tokens")


def _shape_fields(doc: dict) -> dict[str, int]:
    """The model sizes an artifact's config records: d_model, n_layers, n_heads, head_dim (a surfaces
    artifact keeps them in ``model``)."""
    out = {}
    for part in (doc, doc.get("model") if isinstance(doc.get("model"), dict) else {}):
        for key in ("d_model", "n_layers", "n_heads", "head_dim"):
            value = part.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                out.setdefault(key, value)
    layers = doc.get("layers")
    if isinstance(layers, list) and layers and all(isinstance(x, int) for x in layers):
        out["top_layer"] = max(layers)
    return out


def _check_shapes(doc: dict, config, what: str, model: str) -> None:
    """Refuse an artifact whose recorded sizes do not fit the config of ``--model``."""
    from geosteer.models.limits import _config_int

    if config is None:
        return
    have = {"d_model": _config_int(config, ("hidden_size", "n_embd", "d_model")),
            "n_layers": _config_int(config, ("num_hidden_layers", "n_layer", "num_layers")),
            "n_heads": _config_int(config, ("num_attention_heads", "n_head", "num_heads")),
            "head_dim": _config_int(config, ("head_dim",))}
    if have["head_dim"] is None and have["d_model"] and have["n_heads"]:
        have["head_dim"] = have["d_model"] // have["n_heads"]
    rec = _shape_fields(doc)
    for key in ("d_model", "n_layers", "n_heads", "head_dim"):
        if key in rec and have[key] is not None and rec[key] != have[key]:
            raise GeosteerError(f"{what} was made for a model with {key} {rec[key]}; --model {model} has "
                                f"{have[key]}: use it with the model it was made for")
    if "top_layer" in rec and have["n_layers"] is not None and rec["top_layer"] >= have["n_layers"]:
        raise GeosteerError(f"{what} acts on layer {rec['top_layer']}; --model {model} has layers "
                            f"0..{have['n_layers'] - 1}")


def check_spec_artifacts(spec, model: str, *, force: bool = False, base_model: str | None = None) -> None:
    """Every artifact folder ``spec`` names, checked before ``--model`` loads: an artifact of the format its key
    takes, readable on its own (config, tensors, checksum), made for this base model (unless ``force``; a
    recipe's own base model too) and for its sizes (hidden size, layers, heads). One line each."""
    from geosteer.artifacts.config import check_base_model
    from geosteer.methods import artifact_format, load, recipe_keys
    from geosteer.models.identity import recorded_name, same_model

    config = None
    recipe = getattr(spec, "_recipe", None)
    checks: list[tuple[str, str | None]] = [(f"recipe {recipe[0]}", recipe[1])] if recipe else []
    values = spec.to_dict()
    for key, (method, rk) in recipe_keys().items():
        value = values.get(key)
        if rk.kind != "folder" or value is None:
            continue
        folder, fmt = artifact_format(value)
        want = sorted(f.name for f in method.artifacts)
        if want and fmt.name not in want:
            raise GeosteerError(f"{key}={value} is a {fmt.name} artifact; {key} takes a {' or '.join(want)} one")
        load(folder)  # the artifact on its own: its config field by field, its tensors and checksum
        doc = fmt.read(folder)
        what = f"{fmt.name} artifact {folder}"
        checks.append((what, doc.get("base_model")))
        if config is None:
            from geosteer.cli.common import model_config

            config = model_config(model)
        _check_shapes(doc, config, what, model)
    for what, recorded in checks:
        if recorded and not force and not (base_model and same_model(recorded, base_model)) \
                and not same_model(recorded, recorded_name(model)):
            check_base_model(recorded, model, what=what)


def check_artifact(key: str, folder, model: str, *, force: bool = False) -> None:
    """:func:`check_spec_artifacts` for one artifact folder given to recipe key ``key`` (e.g. ``surfaces``)."""
    from geosteer.recipe import InterventionSpec

    check_spec_artifacts(InterventionSpec().with_values(**{key: str(folder)}), model, force=force)
