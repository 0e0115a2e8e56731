"""Activations read from a running server: ``geosteer_capture`` in a request, ``geosteer_activations`` back.

``{"point": "resid_post", "layers": [0, 2], "positions": "prompt" | "all"}`` asks for the steered hidden
state at a hook point. The front issues a token; the input processor admits only issued tokens within
``--max-capture`` values; the layers append (int32 layer, int32 position, float32 values) records to
``<capture dir>/<token>.bin``, which the front reads and removes (docs/serving.md, "Reading activations").
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from geosteer.errors import GeosteerError
from geosteer.served import POINTS

FIELD = "geosteer_capture"  # the request field and the extra_args key
RESULT = "geosteer_activations"
POSITIONS = ("prompt", "all")
_TOKEN = re.compile(r"^[0-9a-f]{32}$")
_ISSUED: OrderedDict = OrderedDict()  # token -> capture spec, bounded
MAX_ISSUED = 4096


def parse(doc: object, n_layers: int) -> dict:
    """A request's capture object, checked: {"point", "layers", "positions"}; one line when it is not valid."""
    if not isinstance(doc, dict) or set(doc) - {"point", "layers", "positions"}:
        raise GeosteerError(f'{FIELD} must be an object {{"point": ..., "layers": [...], "positions": '
                            f'"prompt"|"all"}}; valid points: {", ".join(POINTS)}')
    point, layers, positions = doc.get("point", "resid_post"), doc.get("layers"), doc.get("positions", "prompt")
    if point not in POINTS:
        raise GeosteerError(f"{FIELD}: unknown point {str(point)[:40]!r}; valid: {', '.join(POINTS)}")
    if positions not in POSITIONS:
        raise GeosteerError(f"{FIELD}: positions must be one of {', '.join(POSITIONS)}")
    if (not isinstance(layers, list) or not layers or len(layers) > n_layers
            or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < n_layers for x in layers)
            or len(set(layers)) != len(layers)):
        raise GeosteerError(f"{FIELD}: layers must be a list of distinct layers in 0-{n_layers - 1}")
    return {"point": point, "layers": sorted(layers), "positions": positions}


def issue(spec: dict) -> dict:
    """``spec`` with a fresh token, remembered in this process (what the input processor admits)."""
    token = secrets.token_hex(16)
    _ISSUED[token] = spec
    while len(_ISSUED) > MAX_ISSUED:
        _ISSUED.popitem(last=False)
    return {**spec, "token": token}


def admit(cap: object, prompt_len: int, max_tokens: int, width: int, limit: int) -> dict:
    """The input processor's check of a capture in ``extra_args`` (the object, or its JSON text as the OpenAI
    server's ``vllm_xargs`` carries it): issued here, within ``limit``; the capture object."""
    if isinstance(cap, str) and len(cap) <= 4096:
        try:
            cap = json.loads(cap)
        except (ValueError, RecursionError):
            cap = None
    token = cap.get("token") if isinstance(cap, dict) else None
    if not isinstance(token, str) or token not in _ISSUED or {**_ISSUED[token], "token": token} != cap:
        raise GeosteerError(f"{FIELD} is given as a request field ({FIELD}: {{point, layers, positions}}); "
                            "the server issues its token")
    tokens = prompt_len + (max_tokens if cap["positions"] == "all" else 0)
    size = len(cap["layers"]) * tokens * width
    if size > limit:
        raise GeosteerError(f"{FIELD}: {len(cap['layers'])} layers x {tokens} tokens x {width} values = {size} "
                            f"values, over this server's limit of {limit}; ask for fewer layers or tokens")
    return cap


def forget(token: str) -> None:
    _ISSUED.pop(token, None)


def path_of(folder: str, token: str) -> Path:
    if not _TOKEN.match(token):
        raise GeosteerError("malformed capture token")
    return Path(folder) / f"{token}.bin"


def record(folder: str, token: str, layer: int, positions: torch.Tensor, values: torch.Tensor) -> None:
    """Append rows (positions (n,), values (n, width)) of one layer to the request's capture file."""
    n, width = values.shape
    head = np.empty((n, 2), dtype=np.int32)
    head[:, 0], head[:, 1] = layer, positions.detach().cpu().numpy()
    rows = np.concatenate([head.view(np.float32), values.detach().float().cpu().numpy()], axis=1)
    with open(path_of(folder, token), "ab") as f:
        f.write(np.ascontiguousarray(rows).tobytes())


def collect(folder: str, cap: dict, width: int, n_positions: int) -> dict[str, list[list[float]]]:
    """{"L": [[values] per position 0..n-1]} from the request's capture file (removed after); each position
    once (a recomputed row is the same), positions at or past ``n_positions`` dropped."""
    path = path_of(folder, cap["token"])
    _ISSUED.pop(cap["token"], None)
    try:
        data = np.fromfile(path, dtype=np.float32) if path.is_file() else np.empty(0, np.float32)
    finally:
        path.unlink(missing_ok=True)
    rows = data.reshape(-1, width + 2)
    head = rows[:, :2].copy().view(np.int32)
    out: dict[str, list] = {}
    for layer in cap["layers"]:
        sel = {}
        for r in np.nonzero((head[:, 0] == layer) & (head[:, 1] < n_positions))[0]:
            sel.setdefault(int(head[r, 1]), r)
        if sorted(sel) != list(range(n_positions)):
            raise GeosteerError(f"capture of layer {layer} is incomplete ({len(sel)} of {n_positions} positions)")
        out[str(layer)] = rows[[sel[p] for p in range(n_positions)], 2:].tolist()
    return out


def capture_dir() -> str:
    """A private folder for this server's capture files, removed when the process that made it exits (also
    on SIGTERM, which vLLM's server turns into an orderly exit)."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="geosteer-capture-")
    os.chmod(folder, 0o700)
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:  # not a forked worker leaving before the server does
            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove)
    return folder
