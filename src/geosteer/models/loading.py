"""Load a model by name: a bundled model (:data:`BUNDLED`), a tiny random model, a GGUF file, or an HF id/folder.

Bundled models and ``.gguf`` files are dequantised once into a safetensors cache (``$GEOSTEER_CACHE``, default
``~/.cache/geosteer``) and load from there afterwards; the cache folder is written under a temporary name and
renamed into place with a completion marker, so a conversion killed half-way is detected and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

import torch

from geosteer.attention import use_geosteer_attention
from geosteer.cache import cache_dir
from geosteer.errors import GeosteerError, ModelNotAvailable
from geosteer.extras import require
from geosteer.models.bundled import BUNDLED, BundledModel, ChunkedGGUF  # noqa: F401 - re-exported
from geosteer.models.devices import input_device, resolve_device, resolve_dtype  # noqa: F401 - re-exported
from geosteer.models.identity import (  # noqa: F401 - re-exported (model names and their identity)
    HUB_IDS,
    declare_base,
    declared_bases,
    hub_id,
    model_key,
    same_model,
)
from geosteer.models.positions import guard_positions
from geosteer.models.tiny import TINY_FAMILIES, tiny_model
from geosteer.models.tokenizers import gpt2_tokenizer, smollm2_tokenizer  # noqa: F401 - re-exported
from geosteer.readers import file_kind

DEFAULT_MODEL = "smollm2"
_MARKER = "geosteer-complete.json"


def known_names() -> list[str]:
    return list(BUNDLED) + [f"tiny-{f}" for f in TINY_FAMILIES]


def _check_gguf(path: Path) -> None:
    """Refuse, in one line, a missing path, one not a regular file (by ``stat``: a FIFO is never opened), no GGUF."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise GeosteerError(f"GGUF file not found: {path}") from None
    except OSError as e:
        raise GeosteerError(f"{path}: cannot read it ({e.strerror or type(e).__name__})") from None
    if not S_ISREG(mode):
        raise GeosteerError(f"{path} is not a regular file ({file_kind(mode)}); give a .gguf file")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise GeosteerError(f"{path}: cannot read it ({e.strerror or type(e).__name__})") from None
    if magic != b"GGUF":
        raise GeosteerError(f"{path} is not a GGUF file (missing 'GGUF' magic bytes)")


def _check_gguf_header(path: Path) -> None:
    """Refuse, in one line, a GGUF file whose header or tensor table cannot be read (truncated, garbled)."""
    from gguf import GGUFReader

    try:
        GGUFReader(str(path))  # memory-mapped: reads the header and the tensor table, not the weights
    except Exception as e:  # noqa: BLE001 - a damaged file fails in many ways (struct, numpy, value errors)
        raise GeosteerError(f"{path} is not a readable GGUF file: its header or tensor table is truncated or "
                            f"damaged ({type(e).__name__})") from None


def _load_gguf(path: Path, dtype: torch.dtype, progress: bool = True):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _check_gguf(path)

    require("gguf")  # transformers reads GGUF through it
    _check_gguf_header(path)
    if progress:
        print(f"[geosteer] dequantising {path.name} (one time: ~20 s to a few minutes by size)...", flush=True)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    return model, tok


def _convert_gguf(gguf: Path, target: Path, record: dict) -> None:
    """GGUF → fp32 safetensors folder ``target``, atomically (tmp folder + marker with ``record`` + rename);
    nothing is left behind when it fails."""
    t0 = time.time()
    model, tok = _load_gguf(gguf, torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps({**record, "seconds": round(time.time() - t0, 1)}))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"[geosteer] cached {gguf.name} at {target} ({time.time() - t0:.0f} s)", flush=True)


def _convert_to_cache(bundle: BundledModel, target: Path) -> None:
    """A bundled model's GGUF → its safetensors cache folder."""
    gguf = bundle.gguf_path()
    _convert_gguf(gguf, target, {"source": str(gguf)})
    bundle.converted(gguf)


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


def gguf_cache_folder(path: str | Path) -> Path:
    """The safetensors cache folder for any ``.gguf`` file, converting it first when the cache is missing or
    was made from another version of the file. One folder per resolved path; it is rebuilt when the file's
    size or modification time changes."""
    path = Path(path).expanduser()
    _check_gguf(path)
    path = path.resolve()
    stat = path.stat()
    record = {"source": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    target = cache_dir() / "gguf-files" / hashlib.sha256(str(path).encode()).hexdigest()[:16]
    try:
        done = json.loads((target / _MARKER).read_text())
    except (OSError, ValueError):
        done = {}
    if not isinstance(done, dict) or any(done.get(k) != v for k, v in record.items()):
        _convert_gguf(path, target, record)
    return target


def hub_reachable(timeout: float = 1.0) -> bool:
    """Whether the model hub's host answers a TCP connection within ``timeout`` seconds (False at once under
    ``HF_HUB_OFFLINE=1``). Behind a proxy the answer is True: the proxy decides."""
    if os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on"):
        return False
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout).close()
    except OSError:
        return False
    return True


def _hub_cached(repo: str, revision: str | None = None) -> bool:
    """The repo's ``config.json`` is in the local Hub cache (loadable with ``local_files_only``)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo, "config.json", revision=revision)
    except Exception:  # noqa: BLE001 - an odd repo id is simply not cached
        return False
    return isinstance(found, str)


def check_hub_source(name: str, revision: str | None = None, local_files_only: bool = False) -> None:
    """For a name that will come from the Hub (a Hub id, or an alias whose bundled package is missing):
    refuse at once, in well under a second and before transformers is imported, when it is not in the local
    Hub cache and the hub is not reachable, naming what to install; no minute of HTTP retries first."""
    name = str(name)
    alias = name if name in BUNDLED else None
    if alias and (BUNDLED[alias].installed() or (cache_dir() / alias / _MARKER).is_file()):
        return
    repo = hub_id(name)
    if "/" not in repo or name.startswith((".", "/", "~")) or Path(name).exists() or local_files_only:
        return  # a path (its own errors follow), or the caller asked for the cache only
    if _hub_cached(repo, revision) or hub_reachable():
        return
    if alias:
        raise ModelNotAvailable(
            f"model '{alias}' is not installed: {BUNDLED[alias].missing_packages()} (run "
            f"`{BUNDLED[alias].missing_hint()}`), and its Hub model {repo} is neither in the local Hub cache "
            "nor reachable (offline)")
    raise ModelNotAvailable(
        f"model '{name}' is not in the local Hub cache and the model hub is not reachable (offline); offline "
        f"machines can use {', '.join(BUNDLED)} (bundled packages) or a local folder")


def _from_pretrained(source: str, dtype, device_map, quantization_config, hf_kwargs: dict):
    from transformers import AutoModelForCausalLM

    kw = dict(hf_kwargs)
    kw["dtype"] = dtype
    if device_map is not None:
        kw["device_map"] = device_map
    if quantization_config is not None:
        kw["quantization_config"] = quantization_config
    return AutoModelForCausalLM.from_pretrained(source, **kw)


@dataclass(frozen=True)
class LoadRequest:
    """What :func:`load_model` was asked for, resolved: the dtype to load in and the loader options."""

    dtype: torch.dtype | str
    seed: int
    device_map: str | dict | None
    quantization_config: object
    hf_kwargs: dict


@dataclass(frozen=True)
class ModelSource:
    """One kind of model name: ``matches(name)`` says whether a name is of this kind, ``check(name,
    hf_kwargs)`` refuses it before transformers is imported (or is None), ``load(name, request)`` returns
    ``(model, tokenizer)``."""

    kind: str
    matches: Callable[[str], bool]
    load: Callable[[str, LoadRequest], tuple]
    check: Callable[[str, dict], None] | None = None


def _load_tiny(name: str, req: LoadRequest):
    family = name[len("tiny-") :]
    if family not in TINY_FAMILIES:
        raise GeosteerError(f"unknown tiny model '{name}'; valid: {', '.join(known_names())}")
    if req.quantization_config is not None:
        raise GeosteerError("tiny models are built in memory and cannot be quantised at load")
    model, tok = tiny_model(family, seed=req.seed)
    if isinstance(req.dtype, torch.dtype):
        model.to(req.dtype)
    if req.device_map is not None:
        from accelerate import dispatch_model, infer_auto_device_map

        dm = infer_auto_device_map(model) if isinstance(req.device_map, str) else req.device_map
        model = dispatch_model(model, device_map=dm)
    return model, tok


def _bundled_here(name: str) -> bool:
    """A bundled alias whose package is installed, or whose converted cache is complete."""
    return name in BUNDLED and (BUNDLED[name].installed() or (cache_dir() / name / _MARKER).is_file())


def _load_cached(folder: Path, dtype, req: LoadRequest):
    """A converted cache folder: tokenizer and model, without transformers' progress bars."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    tok = AutoTokenizer.from_pretrained(str(folder))
    hf_logging.disable_progress_bar()
    try:
        model = _from_pretrained(str(folder), dtype, req.device_map, req.quantization_config, req.hf_kwargs)
    finally:
        hf_logging.enable_progress_bar()
    return model, tok


def _load_bundled(name: str, req: LoadRequest):
    model, tok = _load_cached(cached_folder(name), req.dtype, req)
    model.config._geosteer_name = name
    return model, tok


def _load_gguf_file(name: str, req: LoadRequest):
    """A ``.gguf`` file: dequantised once into the cache (:func:`gguf_cache_folder`), then loaded from there."""
    return _load_cached(gguf_cache_folder(name), torch.float32 if req.dtype == "auto" else req.dtype, req)


def _load_folder(name: str, req: LoadRequest):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name)
        model = _from_pretrained(name, req.dtype, req.device_map, req.quantization_config, req.hf_kwargs)
    except (OSError, ValueError) as e:
        raise GeosteerError(f"could not load a causal LM from folder {name}: {str(e).splitlines()[0]}") from None
    return model, tok


def _check_hub(name: str, hf_kwargs: dict) -> None:
    check_hub_source(name, hf_kwargs.get("revision"), bool(hf_kwargs.get("local_files_only")))


def _load_hub(name: str, req: LoadRequest):
    """A Hub id, or a bundled alias whose package is missing (its Hub id); from the Hub cache when offline."""
    from transformers import AutoTokenizer

    if Path(name).exists():
        raise GeosteerError(f"{name} is neither a model folder nor a .gguf file")
    alias = name if name in BUNDLED else None
    repo = HUB_IDS[name] if alias else name
    if "/" not in repo:
        raise GeosteerError(f"unknown model '{name}'; valid names: {', '.join(known_names())}, "
                            "a .gguf file, a local folder, or a hub id like org/model")
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
    kw = dict(req.hf_kwargs)
    kw.setdefault("local_files_only", offline or _hub_cached(repo, kw.get("revision")))
    try:
        tok = AutoTokenizer.from_pretrained(repo, local_files_only=kw["local_files_only"],
                                            revision=kw.get("revision"))
        model = _from_pretrained(repo, req.dtype, req.device_map, req.quantization_config, kw)
    except Exception as e:  # noqa: BLE001 - hub errors come in many types
        if alias:
            raise ModelNotAvailable(
                f"model '{alias}' needs its bundled package ({BUNDLED[alias].missing_hint()}) or the Hub "
                f"model {repo} (network, or its files in the Hub cache; {type(e).__name__})") from None
        raise ModelNotAvailable(
            f"could not fetch '{name}' from the model hub ({type(e).__name__}); offline machines can use "
            f"{', '.join(BUNDLED)} or a local folder"
        ) from None
    if alias:
        model.config._geosteer_name = alias
    return model, tok


# The kinds of model name, tried in this order; the first that matches loads it.
SOURCES: tuple[ModelSource, ...] = (
    ModelSource("tiny", lambda name: name.startswith("tiny-"), _load_tiny),
    ModelSource("bundled", _bundled_here, _load_bundled),
    ModelSource("gguf", lambda name: name.endswith(".gguf"), _load_gguf_file),
    ModelSource("folder", lambda name: Path(name).is_dir(), _load_folder),
    ModelSource("hub", lambda name: True, _load_hub, check=_check_hub),
)


def model_source(name: str) -> ModelSource:
    """The row of :data:`SOURCES` that loads ``name``."""
    return next(source for source in SOURCES if source.matches(name))


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    dtype: str | torch.dtype | None = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    *,
    device_map: str | dict | None = None,
    quantization_config=None,
    base_model: str | None = None,
    **hf_kwargs,
):
    """Return ``(model, tokenizer)`` in eval mode with geosteer's attention function registered.

    ``name_or_path``: ``"smollm2"`` (default), another bundled name (``"gemma3-270m"``, ``"qwen2.5-0.5b"``,
    ``"qwen2.5-1.5b"``: :data:`BUNDLED`), ``"tiny-<family>"``, a ``.gguf``, a folder or a Hub id
    (:data:`SOURCES`). ``dtype``: a dtype, a name or ``"auto"``; ``device`` (ignored with ``device_map``);
    ``device_map``/``quantization_config``/``hf_kwargs`` go to ``from_pretrained``.
    ``base_model``: what a fine-tuned folder derives from (:func:`declare_base`).
    """
    name = str(name_or_path)
    source = model_source(name)
    if source.check is not None:
        source.check(name, hf_kwargs)

    dtype = resolve_dtype(dtype)
    if device_map is None:
        device = resolve_device(device)
    model, tok = source.load(name, LoadRequest(dtype, seed, device_map, quantization_config, hf_kwargs))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if device_map is None and getattr(model, "hf_device_map", None) is None:
        model.to(device)
    model.eval()
    model.requires_grad_(False)
    if not hasattr(model.config, "_geosteer_name"):
        model.config._geosteer_name = name
    if base_model is not None:
        declare_base(model.config._geosteer_name, base_model)
        model.config.geosteer_base_model = str(base_model)
    use_geosteer_attention(model)
    guard_positions(model)
    return model, tok


def model_id(model) -> str:
    """A short name for the base model, recorded in artifacts and results."""
    return str(getattr(model.config, "_geosteer_name", None) or getattr(model.config, "_name_or_path", "") or
               model.config.model_type)
