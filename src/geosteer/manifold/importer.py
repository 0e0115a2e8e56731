"""The attention-manifold paper's released surfaces (``surfaces_grid8.pt``) as a surfaces artifact, and back.

Per layer, one K × K control net per query head and head dim (rows: query axis). The file's keys are not
documented, so :func:`read_released` recognises the layouts such a checkpoint can take (one stacked tensor, a
list, or a mapping keyed by layer, optionally under ``surfaces``/``state_dict``..., with ``grid_size`` and
``grid_range``), read with ``weights_only=True``. :func:`fit_released` checks shapes against a model;
:func:`export_released` writes the per-layer layout.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.io_utils import atomic_write_bytes
from geosteer.manifold.bank import SurfaceBank
from geosteer.manifold.config import ManifoldConfig
from geosteer.models.anatomy import anatomy
from geosteer.models.limits import num_heads, num_layers
from geosteer.readers import ReadRefused, parse_json

MAX_FILE_BYTES = 8 << 30  # a released checkpoint of a 1B/3B model is 15–60 MB; refuse anything absurd
_WRAPPERS = ("surfaces", "coefficients", "state_dict", "model_state_dict", "model")
_LAYER_KEY = re.compile(r"(?:^|[._/])(?:layers?|blocks?|h)[._/]?(\d+)(?=[._/]|$)")
_GRID_KEYS = ("grid_size", "grid")
_RANGE_KEYS = ("grid_range", "range")


@dataclass
class Released:
    """What a released file holds: per-layer tensors as found, and the settings it records (or None)."""

    source: str
    tensors: dict[int, torch.Tensor]  # layer -> tensor, as stored
    keys: dict[int, str]  # layer -> where in the file it was found
    layout: str  # "stacked" | "per-layer mapping" | "list"
    grid_size: int | None = None
    grid_range: tuple[float, float] | None = None
    stacked_layers: int | None = None  # stacked / list layouts: the layer count they imply
    notes: list[str] = field(default_factory=list)


MAX_ELEMENTS = 128 << 20  # numbers in a surfaces file (a 70B-class model's grid-8 surfaces: about 80M)
MAX_LEGACY_BYTES = 512 << 20  # an old-format (non-zip) torch file cannot be read lazily: its size is the cap
_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool}


def _load(path: Path):
    """The file's contents with tensors that are not read yet (memory-mapped): shapes and sizes can be checked
    from the header before any tensor's numbers are loaded."""
    if not path.is_file():
        raise GeosteerError(f"{path}: no such file (the released surfaces checkpoint, e.g. surfaces_grid8.pt)")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise GeosteerError(f"{path}: {path.stat().st_size:,} bytes is more than a surfaces checkpoint can be "
                            f"(at most {MAX_FILE_BYTES:,})")
    if path.suffix == ".safetensors":
        return _load_safetensors(path)
    import zipfile

    lazy = zipfile.is_zipfile(path)
    if not lazy and path.stat().st_size > MAX_LEGACY_BYTES:
        raise GeosteerError(f"{path}: an old-format (non-zip) torch file of {path.stat().st_size:,} bytes; at most "
                            f"{MAX_LEGACY_BYTES:,} (save it again with torch.save to read it lazily)")
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=lazy)
    except Exception as e:  # noqa: BLE001 - pickle, zip and weights-only refusals all mean "not readable here"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GeosteerError(f"{path}: not a PyTorch checkpoint that loads with weights_only=True "
                            f"({first[:200]})") from None


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file as memory-mapped tensors, its header checked first (dtypes, shapes, offsets)."""
    import mmap

    size = path.stat().st_size
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little") if size >= 8 else -1
        if not 2 <= n <= min(size - 8, 16 << 20):
            raise GeosteerError(f"{path}: not a readable safetensors file (no valid header)")
        try:
            header = parse_json(f.read(n).decode("utf-8", errors="strict"), path, what="safetensors header")
        except (ReadRefused, UnicodeDecodeError) as e:
            raise GeosteerError(f"{path}: not a readable safetensors file ({e})") from None
        if not isinstance(header, dict):
            raise GeosteerError(f"{path}: not a readable safetensors file (its header is not an object)")
        entries = {k: v for k, v in header.items() if k != "__metadata__"}
        specs = {k: _st_spec(path, k, v, size - 8 - n) for k, v in entries.items()}
        total = sum(math.prod(shape) for _, shape, _ in specs.values())
        if total > MAX_ELEMENTS:
            raise GeosteerError(f"{path}: holds {total:,} numbers; a surfaces file has at most {MAX_ELEMENTS:,}")
        if not specs:
            return {}
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # copy-on-write: nothing is read until used
    out = {}
    for k, (dtype, shape, begin) in specs.items():
        numel = math.prod(shape)
        out[k] = (torch.frombuffer(mm, dtype=dtype, count=numel, offset=8 + n + begin).reshape(shape) if numel
                  else torch.empty(shape, dtype=dtype))
    return out


def _st_spec(path: Path, name: str, info, data_bytes: int) -> tuple[torch.dtype, tuple[int, ...], int]:
    """(dtype, shape, start) of one header entry, checked against the bytes the file holds."""
    bad = f"{path}: not a readable safetensors file (entry {name[:60]!r}"
    if not isinstance(info, dict):
        raise GeosteerError(f"{bad} is not an object)")
    dtype = _ST_DTYPES.get(info.get("dtype"))
    shape, offs = info.get("shape"), info.get("data_offsets")
    if dtype is None:
        raise GeosteerError(f"{bad} has dtype {info.get('dtype')!r}; valid: {', '.join(_ST_DTYPES)})")
    if not _uints(shape) or not _uints(offs, 2) or not offs[0] <= offs[1] <= data_bytes:
        raise GeosteerError(f"{bad} has a malformed shape or data offsets)")
    if offs[1] - offs[0] != math.prod(shape) * dtype.itemsize:
        raise GeosteerError(f"{bad}: shape {tuple(shape)} does not fit its {offs[1] - offs[0]} bytes)")
    return dtype, tuple(shape), offs[0]


def _uints(xs, n: int | None = None) -> bool:
    """A JSON list of at most 8 non-negative integers (``n`` of them when given)."""
    return (isinstance(xs, list) and (n is None or len(xs) == n) and len(xs) <= 8
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in xs))


def _check_tensors(path: Path, named) -> None:
    """Before any number is read: every tensor dense and real, and not more numbers than a surfaces file holds."""
    total = 0
    for key, t in named:
        if t.layout != torch.strided:
            raise GeosteerError(f"{path}: {key or 'the tensor'} is a {str(t.layout).removeprefix('torch.')} "
                                "tensor; surfaces are dense tensors")
        if t.is_complex() or t.is_quantized:
            raise GeosteerError(f"{path}: {key or 'the tensor'} holds {t.dtype} numbers; surfaces are real floats")
        total += t.numel()
        if total > MAX_ELEMENTS:
            raise GeosteerError(f"{path}: holds more than {MAX_ELEMENTS:,} numbers (at {key or 'the tensor'}, shape "
                                f"{tuple(t.shape)}); a surfaces file holds fewer")


def _settings(doc: dict, found: dict, depth: int = 0) -> None:
    for name in ("config", "settings", "args", "hparams"):
        if isinstance(doc.get(name), dict) and depth < 6:  # deeper nesting is not a settings block
            _settings(doc[name], found, depth + 1)
    for k in _GRID_KEYS:
        if k in doc and not torch.is_tensor(doc[k]):
            found.setdefault("grid", doc[k])
    for k in _RANGE_KEYS:
        if k in doc and not torch.is_tensor(doc[k]):
            found.setdefault("range", doc[k])


def _flatten(doc, prefix: str = "", depth: int = 0, out: dict | None = None) -> dict[str, object]:
    out = {} if out is None else out
    if isinstance(doc, dict) and depth < 6:
        for k, v in doc.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), depth + 1, out)
    else:
        out[prefix] = doc
    return out


def _layer_of(key: str) -> int | None:
    """The layer a flattened key names: ``"8"``, ``"8.coefficients"``, ``"model.layers.8.self_attn.x"``."""
    m = list(_LAYER_KEY.finditer(key))
    if m:
        return int(m[-1].group(1))
    first = key.split(".")[0]
    return int(first) if first.isdigit() else None


def _shapes(items) -> str:
    parts = [f"{k} {tuple(v.shape) if torch.is_tensor(v) else type(v).__name__}" for k, v in items]
    return ", ".join(parts[:6]) + (f", … ({len(parts)} entries)" if len(parts) > 6 else "")


def _grid_setting(value, path: Path) -> int:
    try:
        g = int(value)
        assert g == value and g >= 1
        return g
    except (TypeError, ValueError, AssertionError):
        raise GeosteerError(f"{path}: its grid_size {value!r} is not an integer ≥ 1") from None


def _range_setting(value, path: Path) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in value)
        assert math.isfinite(lo) and math.isfinite(hi) and lo < hi
        return lo, hi
    except (TypeError, ValueError, AssertionError):
        raise GeosteerError(f"{path}: its grid_range {value!r} is not a finite pair lo < hi") from None


def read_released(path: str | Path) -> Released:
    """Read a released surfaces file (see the module docstring) without a model; one-line errors."""
    path = Path(path)
    doc = _load(path)
    found: dict = {}
    if isinstance(doc, dict):
        _settings(doc, found)
        for w in _WRAPPERS:
            inner = doc.get(w)
            if isinstance(inner, (dict, list, tuple)) or torch.is_tensor(inner):
                if isinstance(inner, dict):
                    _settings(inner, found)
                doc = inner
                break
    rel = Released(str(path), {}, {}, layout="per-layer mapping")
    if found.get("grid") is not None:
        rel.grid_size = _grid_setting(found["grid"], path)
    if found.get("range") is not None:
        rel.grid_range = _range_setting(found["range"], path)
    if torch.is_tensor(doc):
        _check_tensors(path, [("", doc)])
        if doc.dim() not in (4, 5):
            raise GeosteerError(f"{path}: holds one tensor of shape {tuple(doc.shape)}; expected (layers, heads, "
                                "head_dim, K, K) or (layers, heads·head_dim, K, K)")
        rel.layout, rel.stacked_layers = "stacked", int(doc.shape[0])
        for i in range(doc.shape[0]):
            rel.tensors[i], rel.keys[i] = doc[i], f"[{i}]"
        return rel
    if isinstance(doc, (list, tuple)):
        bad = [i for i, t in enumerate(doc) if not torch.is_tensor(t)]
        if not doc or bad:
            raise GeosteerError(f"{path}: holds a list of {len(doc)} entries, not one tensor per layer")
        _check_tensors(path, [(f"[{i}]", t) for i, t in enumerate(doc)])
        rel.layout, rel.stacked_layers = "list", len(doc)
        for i, t in enumerate(doc):
            rel.tensors[i], rel.keys[i] = t, f"[{i}]"
        return rel
    if not isinstance(doc, dict):
        raise GeosteerError(f"{path}: holds a {type(doc).__name__}; expected surface tensors (a tensor, a list of "
                            "them, or a mapping from layers to them)")
    flat = _flatten(doc)
    _check_tensors(path, [(k, v) for k, v in flat.items() if torch.is_tensor(v)])
    tensors = {k: v for k, v in flat.items() if torch.is_tensor(v) and v.is_floating_point()}
    for key, t in tensors.items():
        layer = _layer_of(key)
        if layer is None:
            continue
        if layer in rel.tensors:
            raise GeosteerError(f"{path}: two tensors name layer {layer} ({rel.keys[layer]} and {key}); expected "
                                "one surface tensor per layer")
        rel.tensors[layer], rel.keys[layer] = t, key
    if not rel.tensors:
        raise GeosteerError(f"{path}: no surface tensors recognised (found {_shapes(flat.items()) or 'nothing'}); "
                            "expected tensors under keys that name their layer, e.g. 'layers.8' (heads, "
                            "head_dim, K, K)")
    return rel


def _split(shape: tuple[int, ...]) -> tuple[tuple[int, ...], int] | None:
    """(leading dims, K) of one layer's tensor: (a, b, K, K), (s, K, K), (a, b, K·K) or (s, K·K); else None."""
    if len(shape) == 4 and shape[2] == shape[3]:
        return shape[:2], shape[3]
    if len(shape) == 3 and shape[1] == shape[2]:
        return shape[:1], shape[2]
    if len(shape) in (2, 3):
        k = math.isqrt(shape[-1])
        if k * k == shape[-1]:
            return shape[:-1], k
    return None


def _layer_tensor(t: torch.Tensor, layer: int, key: str, n_heads: int, head_dim: int, K: int,
                  src: str) -> torch.Tensor:
    """One layer's tensor as (n_heads, head_dim, K, K), or a one-line error naming what it holds."""
    shape = tuple(t.shape)
    split = _split(shape)
    if split is None:
        raise GeosteerError(f"{src}: layer {layer} ({key}) holds a tensor of shape {shape}; expected {n_heads} × "
                            f"{head_dim} surfaces (heads × head_dim) of {K} × {K}, as (heads, head_dim, K, K) or "
                            "(heads·head_dim, K, K)")
    lead, side = split
    if side != K:
        raise GeosteerError(f"{src}: layer {layer} ({key}) holds {side} × {side} control nets (grid {side - 3}); "
                            f"expected {K} × {K} for grid {K - 3}")
    if len(lead) == 2 and lead != (n_heads, head_dim):
        raise GeosteerError(f"{src}: layer {layer} ({key}) holds {lead[0]} × {lead[1]} surfaces (heads × "
                            f"head_dim); the model has {n_heads} × {head_dim}")
    if len(lead) == 1 and lead[0] != n_heads * head_dim:
        raise GeosteerError(f"{src}: layer {layer} ({key}) holds {lead[0]} surfaces; the model has {n_heads} "
                            f"heads × {head_dim} dims = {n_heads * head_dim} per layer")
    return t.detach().to(torch.float32).reshape(n_heads, head_dim, K, K)


def fit_released(rel: Released, *, n_layers: int, n_heads: int, head_dim: int,
                 grid_size: int | None = None) -> tuple[list[int], torch.Tensor, int]:
    """(layers, coefficients (layers, heads, head_dim, K, K) float32, grid) of ``rel`` on a model of this shape.

    ``grid_size``: the expected grid (None: the file's, else the one its control nets imply). Refuses in one
    line a grid that disagrees with the file's, a layer count or index the model lacks, and surfaces whose
    heads × head_dim are not the model's.
    """
    if grid_size is not None and rel.grid_size is not None and grid_size != rel.grid_size:
        raise GeosteerError(f"{rel.source}: the file records grid {rel.grid_size}, not the grid {grid_size} asked for")
    if rel.stacked_layers is not None and rel.stacked_layers != n_layers:
        raise GeosteerError(f"{rel.source}: holds surfaces for {rel.stacked_layers} layers ({rel.layout}); the model "
                            f"has {n_layers}")
    bad = [x for x in rel.tensors if not 0 <= x < n_layers]
    if bad:
        raise GeosteerError(f"{rel.source}: holds surfaces for layer {max(bad)} ({rel.keys[max(bad)]}); the model has "
                            f"layers 0–{n_layers - 1}")
    layers = sorted(rel.tensors)
    g = grid_size if grid_size is not None else rel.grid_size
    if g is None:
        first = rel.tensors[layers[0]]
        split = _split(tuple(first.shape))
        if split is None or split[1] < 4:
            raise GeosteerError(f"{rel.source}: layer {layers[0]} ({rel.keys[layers[0]]}) holds a tensor of shape "
                                f"{tuple(first.shape)}; expected (heads, head_dim, K, K) control nets")
        g = split[1] - 3
    K = g + 3
    coef = torch.stack([_layer_tensor(rel.tensors[x], x, rel.keys[x], n_heads, head_dim, K, rel.source)
                        for x in layers])
    if not bool(torch.isfinite(coef).all()):
        slot, head, dim = (int(v) for v in torch.nonzero(~torch.isfinite(coef).flatten(3).all(-1))[0])
        raise GeosteerError(f"{rel.source}: the surface of layer {layers[slot]} head {head} dim {dim} holds a "
                            "non-finite coefficient; surfaces must be finite numbers")
    return layers, coef, g


def model_shape(config) -> dict | None:
    """n_layers, n_heads, head_dim from a transformers config (None when it does not name them)."""

    if config is None:
        return None
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    n_layers, n_heads = num_layers(text), num_heads(text)
    hidden = getattr(text, "hidden_size", None) or getattr(text, "n_embd", None)
    head_dim = getattr(text, "head_dim", None) or (hidden // n_heads if hidden and n_heads else None)
    if not (n_layers and n_heads and head_dim):
        return None
    return {"n_layers": int(n_layers), "n_heads": int(n_heads), "head_dim": int(head_dim)}


def to_bank(rel: Released, model, *, grid_size: int | None = None,
            grid_range: tuple[float, float] | None = None):
    """A :class:`~geosteer.manifold.SurfaceBank` for ``model`` holding the released surfaces.

    ``grid_range``: the range to use (None: the file's, else geosteer's default [-4, 4], noted in
    ``bank.meta['source']``); a range that disagrees with the file's is refused.
    """

    an = anatomy(model)
    layers, coef, g = fit_released(rel, n_layers=an.n_layers, n_heads=an.n_heads, head_dim=an.head_dim,
                                   grid_size=grid_size)
    rng, how = choose_range(rel, grid_range)
    cfg = ManifoldConfig.for_model(model, grid_size=g, grid_range=rng, layers=layers)
    bank = SurfaceBank(cfg)
    with torch.no_grad():
        bank.coefficients.copy_(coef)
    bank.meta["source"] = {"file": rel.source, "layout": rel.layout, "grid": g, "grid_range": list(rng),
                           "grid_range_from": how, "layers": layers,
                           "keys": [rel.keys[x] for x in layers][:4] + (["…"] if len(layers) > 4 else [])}
    return bank


def choose_range(rel: Released, grid_range) -> tuple[tuple[float, float], str]:
    """(range, where it came from): ``grid_range`` if given (refused if the file records another), the file's,
    else geosteer's default [-4, 4]."""
    if grid_range is not None:
        lo, hi = float(grid_range[0]), float(grid_range[1])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise GeosteerError(f"--range {lo:g} {hi:g}: a grid range needs finite lo < hi")
        if rel.grid_range is not None and (lo, hi) != rel.grid_range:
            raise GeosteerError(f"{rel.source}: the file records grid range [{rel.grid_range[0]:g}, "
                                f"{rel.grid_range[1]:g}], not the [{lo:g}, {hi:g}] asked for")
        return (lo, hi), "asked for"
    if rel.grid_range is not None:
        return rel.grid_range, "the file"
    return (-4.0, 4.0), "assumed (the file records none; geosteer's default)"


def export_released(bank, path: str | Path, *, flat: bool = False, settings: bool = True,
                    prefix: str = "model.layers.{layer}.self_attn.surfaces") -> Path:
    """Write ``bank`` in the released per-layer layout: ``{prefix.format(layer): (heads, head_dim, K, K)}``
    (``flat``: (heads·head_dim, K, K)), with ``grid_size`` / ``grid_range`` beside them when ``settings``.
    Needs one grid range for all layers (the paper's form)."""

    pairs = {(round(float(a), 6), round(float(b), 6)) for a, b in zip(bank.lo, bank.hi, strict=True)}
    if len(pairs) != 1:
        raise GeosteerError(f"the released layout has one grid range for all layers; these surfaces have {len(pairs)}")
    coef = bank.coefficients.detach().to("cpu", torch.float32)
    H, D, K = coef.shape[1], coef.shape[2], coef.shape[3]
    doc: dict = {prefix.format(layer=x): (coef[i].reshape(H * D, K, K) if flat else coef[i]).clone()
                 for i, x in enumerate(bank.layers)}
    if settings:
        lo, hi = next(iter(pairs))
        doc = {"grid_size": bank.grid_size, "grid_range": [lo, hi], "surfaces": doc}
    import io

    buf = io.BytesIO()
    torch.save(doc, buf)
    return atomic_write_bytes(path, buf.getvalue())
