"""repeng's GGUF control-vector file (``general.architecture = controlvector``, ``controlvector.model_hint``,
``controlvector.layer_count``, one ``direction.<layer>`` tensor per layer), the format llama.cpp's
``--control-vector`` reads. The writer needs only the vectors' ``point``, ``model_type`` and ``vectors``; the
reader (:func:`geosteer.vectors.artifact.import_gguf`) builds a :class:`~geosteer.vectors.SteeringVectors`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from geosteer.errors import GeosteerError

GGUF_ARCH = "controlvector"


def export_gguf(sv: Any, path: str | Path) -> Path:
    """Write repeng's GGUF control-vector file (the vectors as stored, without the scale); atomic."""
    from geosteer.extras import require

    gguf = require("gguf")
    if sv.point != "resid_post":
        raise GeosteerError(f"the GGUF control-vector format adds to each layer's output (resid_post); "
                            f"these vectors are at {sv.point}")
    path = Path(path)
    if path.is_dir():
        raise GeosteerError(f"{path} is a folder; give the .gguf file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp, GGUF_ARCH)
        writer.add_string(f"{GGUF_ARCH}.model_hint", sv.model_type)
        writer.add_uint32(f"{GGUF_ARCH}.layer_count", len(sv.vectors))
        for layer, v in sv.vectors.items():
            writer.add_tensor(f"direction.{layer}", v.detach().float().cpu().numpy())
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
