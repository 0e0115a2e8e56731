"""The learned-scales artifact (format ``geosteer-directional-scales``): per-layer s∥, s⊥ at one site.

``scales.safetensors`` holds ``s_par`` and ``s_perp`` (float32, in the order of ``layers``);
:func:`load_scales` reads it; the recipe key ``scale_learned=FOLDER`` applies it.
"""

from __future__ import annotations

from pathlib import Path

from geosteer.artifacts import CONFIG_NAME, ArtifactFormat, check_base_model, load_state, write_state
from geosteer.directional.learned import LearnedScales
from geosteer.errors import ArtifactError, GeosteerError

WEIGHTS_NAME = "scales.safetensors"
_KNOWN = ("base_model", "site", "layers", "n_layers", "meta")


def _card(sc: LearnedScales, base_model: str, meta: dict, command: str | None) -> str:
    te = meta.get("train_eval") or {}
    extra = {"site": sc.site, "layers": ", ".join(map(str, sc.layers))}
    extra.update({f"training prompts: {k}": round(float(v), 4) for k, v in te.items()})
    rows = "\n".join(f"| {r['layer']} | {r['s_par']:.4f} | {r['s_perp']:.4f} |" for r in sc.scales())
    return SCALES.card(
        base_model=base_model, title=f"Learned ∥/⊥ scales for {base_model}",
        summary=f"Per-layer component scales s∥, s⊥ at `{sc.site}`, learned to promote a behaviour under a "
                "control-KL budget. Apply with the recipe key `scale_learned=FOLDER` (`geosteer ppl|generate "
                "--set scale_learned=FOLDER`) or `geosteer.load(FOLDER, model=model)`.\n\n"
                f"| layer | s∥ | s⊥ |\n|---|---|---|\n{rows}",
        n_parameters=2 * len(sc.layers), command=command, files=[CONFIG_NAME, WEIGHTS_NAME], extra=extra,
        tags=["steering", "directional"])


def to_state(sc: LearnedScales) -> tuple[dict, dict]:
    """Site, layers, base model, training record; ``s_par`` and ``s_perp`` (one value per layer)."""
    base = getattr(sc, "base_model", None)
    if not isinstance(base, str) or not base:
        raise ArtifactError("these learned scales record no base model; pass base_model= to save them")
    cfg = {"base_model": base, "site": sc.site, "layers": sc.layers, "n_layers": getattr(sc, "n_layers", None),
           "meta": dict(getattr(sc, "meta", None) or {})}
    return cfg, {"s_par": sc.s_par.detach().float(), "s_perp": sc.s_perp.detach().float()}


def from_state(cfg: dict, tensors: dict, model=None, *, force: bool = False,
               source: str = "learned scales") -> LearnedScales:
    """The scales of a checked config and its tensors; with ``model``: base model and layer range checked."""
    n = len(cfg["layers"])
    if set(tensors) != {"s_par", "s_perp"} or any(t.shape != (n,) for t in tensors.values()):
        raise ArtifactError(f"{source}: expected the tensors s_par and s_perp of {n} values each (one per layer), "
                            f"got {', '.join(f'{k} {tuple(t.shape)}' for k, t in sorted(tensors.items()))}")
    try:
        sc = LearnedScales(cfg["site"], cfg["layers"], tensors["s_par"], tensors["s_perp"])
    except GeosteerError as e:
        raise ArtifactError(f"{source}: {e}") from None
    sc.base_model, sc.n_layers, sc.meta = cfg["base_model"], cfg.get("n_layers"), dict(cfg.get("meta") or {})
    if model is not None:
        from geosteer.models.anatomy import anatomy
        from geosteer.models.loading import model_id

        check_base_model(sc.base_model, model_id(model), what=f"learned scales at {source}", force=force)
        anatomy(model).check_layers(sc.layers)
    return sc


def save_scales(sc: LearnedScales, folder: str | Path, *, base_model: str | None = None,
                n_layers: int | None = None, meta: dict | None = None, command: str | None = None,
                overwrite: bool = True) -> Path:
    """Write the artifact folder atomically (config, ``scales.safetensors``, model card). ``base_model``,
    ``n_layers``, ``meta``: default to what the scales carry (those loaded from an artifact do)."""
    base_model = base_model or getattr(sc, "base_model", None)
    meta = meta if meta is not None else getattr(sc, "meta", None)
    sc.base_model, sc.n_layers = base_model, n_layers if n_layers is not None else getattr(sc, "n_layers", None)
    sc.meta = {**(meta or {}), **({"command": command} if command else {})}
    return write_state(SCALES, sc, folder, overwrite=overwrite, card=_card(sc, base_model, meta or {}, command))


def load_scales(folder: str | Path, model=None, *, force: bool = False) -> LearnedScales:
    """Read a learned-scales artifact; with ``model``, check it was made for it (base model, layer range)."""
    return load_state(SCALES, folder, model, force=force)


SCALES = ArtifactFormat("geosteer-directional-scales", 1, tensors=(WEIGHTS_NAME,), known_keys=_KNOWN,
                        method="directional", saves=LearnedScales, to_state=to_state, from_state=from_state,
                        save=lambda sc, folder, **kw: save_scales(sc, folder, **kw))
