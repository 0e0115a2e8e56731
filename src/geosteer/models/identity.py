"""Which weights a model name means: geosteer aliases and their Hub ids (matched both ways), and the base
model a fine-tuned folder declares. Artifacts record a base model; these decide whether another name is it.
"""

from __future__ import annotations

from pathlib import Path

from geosteer.readers import ReadRefused, read_json, read_text

# geosteer alias -> the Hub id of the same weights (model cards link to it; the fallback when the bundled
# package is absent)
HUB_IDS: dict[str, str] = {
    "smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "gemma3-270m": "google/gemma-3-270m",
    "qwen2.5-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
}


def hub_id(name: str) -> str:
    """The Hub id for a geosteer model alias (``smollm2`` -> ``HuggingFaceTB/SmolLM2-135M-Instruct``);
    any other name is returned unchanged (it is already a Hub id, a folder or a tiny model)."""
    return HUB_IDS.get(str(name), str(name))


def model_key(name: str) -> str:
    """A comparable identity of a model name: an existing file/folder resolved, an alias as its Hub id,
    lower-case (so ``smollm2`` and ``HuggingFaceTB/SmolLM2-135M-Instruct`` are the same model)."""
    name = str(name).strip()
    p = Path(name).expanduser()
    if name and p.exists():
        return str(p.resolve())
    return hub_id(name).lower()


def same_model(a: str, b: str) -> bool:
    """``a`` and ``b`` name the same weights: equal paths, or aliases and Hub ids mapped both ways."""
    return model_key(a) == model_key(b)


def recorded_name(name: str) -> str:
    """The name :func:`geosteer.models.loading.model_id` will give ``name`` once loaded, read without loading:
    a folder saved from a geosteer-loaded model keeps that model's name (``_geosteer_name`` in its
    ``config.json``); any other name is itself."""
    folder = Path(str(name)).expanduser()
    if not folder.is_dir():
        return str(name)
    try:
        cfg = read_json(folder / "config.json", what="model config")
    except ReadRefused:
        return str(name)
    recorded = cfg.get("_geosteer_name") if isinstance(cfg, dict) else None
    return recorded if isinstance(recorded, str) and recorded else str(name)


_DECLARED_BASES: dict[str, str] = {}  # model_key -> the base model declared with load_model(base_model=...)


def declare_base(name: str, base_model: str) -> None:
    """Record that ``name`` (a fine-tuned folder, a Hub id) derives from ``base_model`` for this process:
    artifacts made for ``base_model`` then load on it without ``force`` (``load_model(base_model=...)``)."""
    _DECLARED_BASES[model_key(name)] = str(base_model)


def declared_bases(name: str) -> list[str]:
    """The base models that ``name`` declares: :func:`declare_base`, then for a folder its ``config.json``
    field ``geosteer_base_model`` and its model card's ``base_model`` (``README.md`` front matter, the Hub's
    own field, written by the Trainer, PEFT and ``push_to_hub``)."""
    out = [_DECLARED_BASES[k]] if (k := model_key(name)) in _DECLARED_BASES else []
    folder = Path(str(name)).expanduser()
    if not folder.is_dir():
        return out
    try:
        cfg = read_json(folder / "config.json", what="model config")
        if isinstance(cfg, dict) and isinstance(cfg.get("geosteer_base_model"), str):
            out.append(cfg["geosteer_base_model"])
    except ReadRefused:
        pass
    out.extend(_card_bases(folder / "README.md"))
    return out


def _card_bases(readme: Path) -> list[str]:
    """``base_model`` of a model card's YAML front matter (a name or a list of names); [] without one."""
    try:
        text = read_text(readme, what="model card")
    except ReadRefused:
        return []
    if not text.startswith("---"):
        return []
    end = text.find("\n---", 3)
    if end < 0:
        return []
    import yaml

    try:
        meta = yaml.safe_load(text[3:end])
    except yaml.YAMLError:
        return []
    base = meta.get("base_model") if isinstance(meta, dict) else None
    if isinstance(base, str):
        return [base]
    return [b for b in base if isinstance(b, str)] if isinstance(base, list) else []
