"""The learned-scales artifact (format ``geosteer-directional-scales``): per-layer s∥, s⊥ at one site.

A folder: ``geosteer_config.json`` (format, site, layers, base model, the training record under ``meta``),
``scales.safetensors`` (``s_par`` and ``s_perp``: float32, one value per layer, in the order of ``layers``)
and a model card. :func:`load_scales` reads it (also ``geosteer.load`` and Hub ids ``org/name[@rev]``); the
recipe key ``scale_learned=FOLDER`` applies it on every verb that takes ``--recipe``/``--set``.
"""

from __future__ import annotations

import json
from pathlib import Path

from geosteer.artifacts import CARD_NAME, CONFIG_NAME, check_base_model, locate, write_folder_atomic
from geosteer.directional.learned import LearnedScales
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.methods import ArtifactFormat

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


def save_scales(sc: LearnedScales, folder: str | Path, *, base_model: str, n_layers: int | None = None,
                meta: dict | None = None, command: str | None = None, overwrite: bool = True) -> Path:
    """Write the artifact folder atomically (config, ``scales.safetensors``, model card)."""
    from safetensors.torch import save_file

    tensors = {"s_par": sc.s_par.detach().float().cpu().contiguous(),
               "s_perp": sc.s_perp.detach().float().cpu().contiguous()}
    doc = {**SCALES.header(), "base_model": base_model, "site": sc.site, "layers": sc.layers,
           "n_layers": n_layers, "meta": {**(meta or {}), **({"command": command} if command else {})}}

    def fill(tmp: Path) -> None:
        (tmp / CONFIG_NAME).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / WEIGHTS_NAME), metadata={"format": SCALES.name, "site": sc.site})
        (tmp / CARD_NAME).write_text(_card(sc, base_model, meta or {}, command), encoding="utf-8")

    return write_folder_atomic(folder, fill, overwrite=overwrite, kind=SCALES.name)


def load_scales(folder: str | Path, model=None, *, force: bool = False) -> LearnedScales:
    """Read a learned-scales artifact; with ``model``, check it was made for it (base model, layer range)."""
    from safetensors.torch import load_file

    path = locate(folder)
    if not (path / WEIGHTS_NAME).is_file():
        raise ArtifactError(f"{path} is not a learned-scales artifact (needs {CONFIG_NAME} and {WEIGHTS_NAME})")
    cfg = SCALES.read(path)
    raw = load_file(str(path / WEIGHTS_NAME))
    if set(raw) != {"s_par", "s_perp"}:
        raise ArtifactError(f"{path / WEIGHTS_NAME}: expected the tensors s_par and s_perp, got "
                            f"{', '.join(sorted(raw))}")
    layers = cfg.get("layers")
    if not isinstance(layers, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
        raise ArtifactError(f"{path}: layers must be a list of layer indices")
    try:
        sc = LearnedScales(cfg.get("site", ""), layers, raw["s_par"], raw["s_perp"])
    except GeosteerError as e:
        raise ArtifactError(f"{path}: {e}") from None
    if model is not None:
        from geosteer.models.anatomy import anatomy
        from geosteer.models.loading import model_id

        check_base_model(cfg.get("base_model"), model_id(model), what=f"learned scales at {path}", force=force)
        anatomy(model).check_layers(sc.layers)
    return sc


SCALES = ArtifactFormat("geosteer-directional-scales", 1, tensors=(WEIGHTS_NAME,), known_keys=_KNOWN,
                        load=lambda folder, model: load_scales(folder, model), method="directional",
                        saves=LearnedScales, save=lambda sc, folder, **kw: save_scales(sc, folder, **kw))
