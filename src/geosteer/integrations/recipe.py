"""An intervention recipe: every geosteer intervention a run applies, as flat ``key=value`` settings.

The same settings drive the lm-evaluation-harness model type (``--model_args``) and the recipe artifact
(a folder: ``geosteer_config.json`` + the surfaces/gates it uses + a model card). Keys:

============================  ====================================================================
``surfaces``                  surfaces artifact folder (attention manifolds, ``geosteer.manifold``)
``edits``                     edits of those surfaces (``geosteer.manifold.edit`` text form), separated by
                              ``;`` — e.g. ``invert layer=8;scale=0.5 layer=3 head=1`` —, a list, or a
                              JSON file holding a list of such strings or ``Edit`` dicts
``scale_site``                component scaling site (``geosteer.directional``, paper Eq. 11)
``scale_par``/``scale_perp``  s∥ / s⊥ (default 1)
``scale_layers``              layers, e.g. ``all``, ``3``, ``0-5;9`` (``;`` because model_args split on ``,``)
``ffn_variant``               full | zero | radial | tangential | attn_zero (``geosteer.dynamics``)
``ffn_layers``                layers of the variant
``gates``                     FFN gate artifact folder (``geosteer.dynamics.gates``)
``beta_attn``/``alpha_ffn``   branch gains (dynamics, App. C.1 Eq. 24), on ``gain_layers``
``parallel_layers``           layers replaced by the parallel surrogate (dynamics Eq. 22)
============================  ====================================================================

Other packages add their own keys with :func:`register_builder` (the extension point): a builder gets
the model and the values of its keys and returns interventions.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from geosteer.artifacts import CONFIG_NAME, base_fields, read_config, render_model_card, write_folder_atomic
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.models.anatomy import parse_layers

FORMAT = "geosteer-recipe"
VERSION = 1

Builder = Callable[[nn.Module, dict], list]


@dataclass
class _Registered:
    keys: tuple[str, ...]
    build: Builder


_BUILDERS: dict[str, _Registered] = {}


def register_builder(name: str, keys: Sequence[str], build: Builder) -> None:
    """Let a package contribute interventions from its own recipe keys (``build(model, values)``)."""
    taken = set(InterventionSpec.KEYS) | {k for r in _BUILDERS.values() for k in r.keys}
    clash = sorted(set(keys) & taken)
    if clash and name not in _BUILDERS:
        raise ValueError(f"recipe keys already taken: {', '.join(clash)}")
    _BUILDERS[name] = _Registered(tuple(keys), build)


def registered_keys() -> list[str]:
    return [k for r in _BUILDERS.values() for k in r.keys]


def _num(name: str, v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise GeosteerError(f"{name} must be a number (got {v!r})") from None


@dataclass
class InterventionSpec:
    """The interventions of one run (see the module docstring). All defaults: the stock model."""

    surfaces: str | None = None
    edits: Any = None
    scale_site: str | None = None
    scale_par: float = 1.0
    scale_perp: float = 1.0
    scale_layers: Any = None
    ffn_variant: str = "full"
    ffn_layers: Any = None
    gates: str | None = None
    beta_attn: float = 1.0
    alpha_ffn: float = 1.0
    gain_layers: Any = None
    parallel_layers: Any = None
    extra: dict = field(default_factory=dict)

    KEYS = ("surfaces", "edits", "scale_site", "scale_par", "scale_perp", "scale_layers", "ffn_variant",
            "ffn_layers", "gates", "beta_attn", "alpha_ffn", "gain_layers", "parallel_layers")

    @classmethod
    def pop_from(cls, args: dict) -> InterventionSpec:
        """Take the recipe keys (and registered ones) out of ``args``; the rest stays for the caller."""
        kw = {k: args.pop(k) for k in cls.KEYS if k in args}
        extra = {k: args.pop(k) for k in registered_keys() if k in args}
        spec = cls(**kw, extra=extra)
        spec.validate()
        return spec

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InterventionSpec:
        args = dict(d)
        extra = dict(args.pop("extra", None) or {})
        spec = cls.pop_from(args)
        spec.extra.update(extra)
        if args:
            raise GeosteerError(f"unknown recipe keys: {', '.join(sorted(args))}; valid: "
                                f"{', '.join(cls.KEYS + tuple(registered_keys()))}")
        return spec

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.KEYS}
        d["extra"] = dict(self.extra)
        return d

    def validate(self) -> None:
        from geosteer.directional.config import check_site
        from geosteer.dynamics.config import check_variant

        for k in ("scale_par", "scale_perp", "beta_attn", "alpha_ffn"):
            setattr(self, k, _num(k, getattr(self, k)))
        if self.scale_site is not None:
            check_site(self.scale_site)
        check_variant(self.ffn_variant)
        if self.edits is not None and self.surfaces is None:
            raise GeosteerError("edits= needs surfaces= (the edits change a surfaces artifact)")

    def _edit_list(self) -> list:
        """The edits as a list of text-form strings / ``Edit`` dicts (not yet validated)."""
        if self.edits is None:
            return []
        if isinstance(self.edits, (list, tuple)):
            return list(self.edits)
        p = Path(str(self.edits))
        if not p.is_file():
            if str(self.edits).endswith(".json"):
                raise GeosteerError(f"edits file not found: {p} (a JSON list of surface edits)")
            return [e.strip() for e in str(self.edits).split(";") if e.strip()]
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise GeosteerError(f"edits file {p} is not valid JSON ({e})") from None
        doc = doc.get("edits", doc) if isinstance(doc, dict) else doc
        if not isinstance(doc, list):
            raise GeosteerError(f"edits file {p} must hold a JSON list of edits")
        return doc

    def build(self, model: nn.Module) -> list:
        """The interventions, in a fixed order: surfaces, component scaling, FFN variant, gates, gains,
        parallel layers, then registered builders. Not attached yet."""
        from geosteer.models.anatomy import anatomy

        n = anatomy(model).n_layers
        out: list = []
        if self.surfaces is not None:
            out.append(self._surfaces(model))
        if self.scale_site is not None:
            from geosteer.directional.sites import ComponentScale

            out.append(ComponentScale(self.scale_site, self.scale_par, self.scale_perp,
                                      parse_layers(self.scale_layers, n)))
        if self.ffn_variant != "full":
            from geosteer.dynamics.variants import FFNVariant

            out.append(FFNVariant(self.ffn_variant, parse_layers(self.ffn_layers, n)))
        if self.gates is not None:
            from geosteer.dynamics.gates import load_gates

            out.append(load_gates(self.gates, model))
        if self.beta_attn != 1.0 or self.alpha_ffn != 1.0:
            from geosteer.dynamics.variants import Gains

            out.append(Gains(self.beta_attn, self.alpha_ffn, parse_layers(self.gain_layers, n)))
        if self.parallel_layers is not None:
            from geosteer.dynamics.variants import Parallelize

            out.append(Parallelize(parse_layers(self.parallel_layers, n) or list(range(n))))
        for reg in _BUILDERS.values():
            vals = {k: self.extra[k] for k in reg.keys if k in self.extra}
            if vals:
                out.extend(reg.build(model, vals))
        return out

    def _surfaces(self, model: nn.Module):
        import geosteer.manifold as M
        from geosteer.manifold.edit import Edit, apply_edits

        bank = M.load(self.surfaces, model=model)
        edits = self._edit_list()
        if edits:
            try:
                apply_edits(bank, [Edit.from_dict(e) if isinstance(e, dict) else e for e in edits])
            except (ValueError, TypeError) as e:
                raise GeosteerError(f"bad surface edit in edits={self.edits!r}: {e}") from None
        return bank


def save_recipe(folder: str | Path, spec: InterventionSpec, *, base_model: str, command: str | None = None,
                ppl_before: float | None = None, ppl_after: float | None = None, summary: str = "") -> Path:
    """Write a self-contained recipe folder: the surfaces/gates it names are copied in, edits inlined."""
    d = spec.to_dict()
    d["edits"] = spec._edit_list() or None

    def fill(tmp: Path) -> None:
        files = [CONFIG_NAME]
        for key in ("surfaces", "gates"):
            if d[key] is not None:
                shutil.copytree(Path(d[key]), tmp / key)
                files += [f"{key}/{p.name}" for p in sorted((tmp / key).iterdir())]
                d[key] = key
        doc = {**base_fields(FORMAT, VERSION), "base_model": base_model, "interventions": d}
        (tmp / CONFIG_NAME).write_text(json.dumps(doc, indent=2) + "\n")
        (tmp / "README.md").write_text(render_model_card(
            method="recipe", base_model=base_model, summary=summary or "A geosteer intervention recipe.",
            ppl_before=ppl_before, ppl_after=ppl_after, command=command, files=files,
            extra={k: v for k, v in d.items() if v not in (None, {}, 1.0, "full")}))

    return write_folder_atomic(folder, fill)


def load_recipe(folder: str | Path) -> tuple[InterventionSpec, dict]:
    """``(spec, config)`` of a recipe folder (or Hub repo id ``org/name[@revision]``); relative artifact
    paths resolve inside the folder."""
    from geosteer.artifacts import locate

    folder = locate(folder)
    doc = read_config(folder, fmt=FORMAT, reader_version=VERSION, known_keys=("base_model", "interventions"))
    inter = dict(doc.get("interventions") or {})
    known = set(InterventionSpec.KEYS) | {"extra"} | set(registered_keys())
    for k in sorted(set(inter) - known):  # keys of a newer recipe: warned by check_config's convention
        import warnings

        from geosteer.artifacts import ArtifactWarning

        warnings.warn(f"{folder}: ignoring unknown intervention key '{k}'", ArtifactWarning, stacklevel=2)
        inter.pop(k)
    for key in ("surfaces", "gates"):
        if inter.get(key) is not None and not Path(inter[key]).is_absolute():
            inter[key] = str(folder / inter[key])
    try:
        return InterventionSpec.from_dict(inter), doc
    except GeosteerError as e:
        raise ArtifactError(f"{folder}: {e}") from None
