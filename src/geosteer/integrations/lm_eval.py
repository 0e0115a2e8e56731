"""lm-evaluation-harness model type ``geosteer``: a stock ``HFLM`` with geosteer interventions attached.

Run as ``geosteer eval --model geosteer --model_args pretrained=smollm2,scale_site=attn_out,... --tasks ...``
(lm-eval has no plugin entry point), or ``import geosteer.integrations.lm_eval`` before
``lm_eval.simple_evaluate(model="geosteer")``. ``model_args``: ``pretrained``, ``recipe``, the registered
recipe keys, any ``HFLM`` argument; without keys it scores exactly as ``--model hf`` (docs/ecosystem.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from geosteer.models.loading import input_device

try:
    from lm_eval.api.registry import register_model
    from lm_eval.models.huggingface import HFLM
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the lm-evaluation-harness integration needs lm-eval: "
                      "pip install 'geosteer[eval]'") from e

from geosteer.attention import use_geosteer_attention
from geosteer.errors import GeosteerError
from geosteer.methods import recipe_keys
from geosteer.models.devices import resolve_dtype
from geosteer.models.loading import BUNDLED, cached_folder
from geosteer.recipe import InterventionSpec, load_recipe

MODEL_NAME = "geosteer"
_OWN_ARGS = ("pretrained", "recipe", "dtype")


def valid_model_args() -> list[str]:
    """Every ``--model_args`` key ``--model geosteer`` takes: its own, the recipe keys, lm-eval's ``hf`` ones."""
    import inspect

    hf = [p for p in inspect.signature(HFLM.__init__).parameters if p not in ("self", "kwargs", *_OWN_ARGS)]
    return [*_OWN_ARGS, *recipe_keys(), *hf]


def check_model_args(args: Mapping[str, Any]) -> None:
    """Refuse, in one line and before any model loads, ``--model_args`` that ``--model geosteer`` would not use:
    an unknown key (naming the valid ones, and the closest), an empty ``pretrained``, an unknown ``dtype``."""
    import difflib

    valid = valid_model_args()
    unknown = sorted(set(args) - set(valid))
    if unknown:
        close = difflib.get_close_matches(unknown[0], valid, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise GeosteerError(f"unknown --model_args key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for "
                            f"--model {MODEL_NAME}{hint}; valid: {', '.join(valid)}")
    pretrained = args.get("pretrained", "smollm2")
    if not isinstance(pretrained, str) or not pretrained.strip():
        raise GeosteerError(f"--model_args pretrained={pretrained!r}: give a model name, folder or Hub id "
                            "(e.g. pretrained=smollm2)")
    check_pretrained(pretrained)
    dtype = args.get("dtype", "float32")
    if not isinstance(dtype, str) and dtype is not None and not hasattr(dtype, "is_floating_point"):
        raise GeosteerError(f"--model_args dtype={dtype!r}: give a dtype name")
    if isinstance(dtype, str):
        try:
            resolve_dtype(dtype)
        except GeosteerError as e:
            raise GeosteerError(f"--model_args dtype={dtype}: {e}") from None


def check_pretrained(name: str) -> None:
    """Refuse, in one line and before lm-eval or a model loads, a ``pretrained`` that names no loadable model: an
    unknown short name or tiny family, a missing folder or ``.gguf`` file, a malformed Hub id, or a Hub id that is
    neither in the local cache nor reachable."""
    from pathlib import Path

    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from geosteer.models.loading import check_hub_source, known_names

    what = f"--model_args pretrained={name}"
    valid = f"valid: {', '.join(known_names())}, a .gguf file, a model folder or a Hub id (org/name)"
    p = Path(name).expanduser()
    if name in BUNDLED or p.is_dir() or (name.endswith(".gguf") and p.is_file()):
        pass
    elif name.startswith("tiny-"):
        if name not in known_names():
            raise GeosteerError(f"{what}: unknown tiny model; {valid}")
    elif name.endswith(".gguf") or name.startswith((".", "/", "~")) or p.exists():
        raise GeosteerError(f"{what}: no such model folder or .gguf file; {valid}")
    elif "/" not in name:
        raise GeosteerError(f"{what}: unknown model; {valid}")
    else:
        try:
            validate_repo_id(name)
        except HFValidationError:
            raise GeosteerError(f"{what}: not a Hub id (org/name: letters, digits, '-', '_', '.'); {valid}") from None
    try:
        check_hub_source(name)
    except GeosteerError as e:
        raise GeosteerError(f"{what}: {e}") from None


def _dtype_name(dtype: Any) -> Any:
    """A dtype name as torch spells it (lm-eval's ``hf`` reads ``getattr(torch, name)``): ``bf16`` → ``bfloat16``."""
    if not isinstance(dtype, str):
        return dtype

    resolved = resolve_dtype(dtype)
    return resolved if isinstance(resolved, str) else str(resolved).removeprefix("torch.")


def _resolve_pretrained(pretrained: str, dtype: Any):
    """``(what HFLM gets, tokenizer or None, geosteer model id)`` for a geosteer model name."""

    name = str(pretrained)
    if name in BUNDLED:
        return str(cached_folder(name)), None, name
    if name.startswith("tiny-") or name.endswith(".gguf"):
        import torch

        from geosteer.models.loading import load_model

        td = getattr(torch, str(dtype)) if isinstance(dtype, str) and dtype != "auto" else torch.float32
        model, tok = load_model(name, dtype=td)
        return model, tok, name
    return name, None, name


@register_model(MODEL_NAME)
class GeosteerLM(HFLM):
    """``HFLM`` + geosteer interventions, attached for the lifetime of the object
    (:meth:`remove_interventions` restores the stock model)."""

    def __init__(self, pretrained: str = "smollm2", recipe: str | None = None, dtype: Any = "float32",
                 **kwargs: Any) -> None:
        check_model_args({"pretrained": pretrained, "dtype": dtype, **({"recipe": recipe} if recipe else {}),
                          **kwargs})
        dtype = _dtype_name(dtype)
        given = {k: kwargs[k] for k in recipe_keys() if k in kwargs}
        spec = InterventionSpec.pop_from(kwargs)
        if recipe is not None:  # intervention keys on top of the recipe, as --recipe and --set elsewhere
            spec = load_recipe(recipe)[0].with_values(**given)
        target, tok, name = _resolve_pretrained(pretrained, dtype)
        if tok is not None:
            kwargs.setdefault("tokenizer", tok)
        try:
            super().__init__(pretrained=target, dtype=dtype, **kwargs)
        except OSError as e:  # a Hub id that does not exist, a folder without a model: one line
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise GeosteerError(f"--model_args pretrained={pretrained}: cannot load it ({first})") from None
        self.geosteer_spec = spec
        self._removers: list = []
        self._attach(name)

    def _attach(self, name: str) -> None:
        from torch import nn

        model = self._model
        model.requires_grad_(False)

        # as geosteer.load_model names it (artifacts check this id): bundled names win, folders keep theirs
        if name in BUNDLED or not getattr(model.config, "_geosteer_name", None):
            model.config._geosteer_name = name
        use_geosteer_attention(model)
        self.interventions = self.geosteer_spec.build(model)
        device = input_device(model)
        try:
            for iv in self.interventions:
                if isinstance(iv, nn.Module):
                    iv.to(device)
                self._removers.append(iv.attach(model))
        except Exception:
            self.remove_interventions()
            raise

    def remove_interventions(self) -> None:
        """Detach every intervention (reverse order); the wrapped model is the stock model again."""
        while self._removers:
            self._removers.pop()()


def main(argv: list[str] | None = None) -> None:
    """lm-eval's own command line (``argv``: its arguments; default ``sys.argv[1:]``), ``geosteer``
    registered: ``geosteer eval ...`` and ``python -m geosteer.integrations.lm_eval ...``."""
    import sys

    from lm_eval.__main__ import cli_evaluate

    if argv is not None:
        sys.argv = ["lm-eval", *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
