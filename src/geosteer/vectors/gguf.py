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
from geosteer.extras import require
from geosteer.io_utils import check_output_path, default_mode, raise_if_disk_full, tree_bytes

GGUF_ARCH = "controlvector"


def export_gguf(sv: Any, path: str | Path) -> Path:
    """Write repeng's GGUF control-vector file (the vectors as stored, without the scale); atomic."""

    gguf = require("gguf")
    if sv.point != "resid_post":
        raise GeosteerError(f"the GGUF control-vector format adds to each layer's output (resid_post); "
                            f"these vectors are at {sv.point}")
    path = check_output_path(path, what="GGUF file")  # not a folder, not under a file, writable
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
        os.chmod(tmp, default_mode())  # mkstemp's file is owner-only; the user's umask decides instead
        os.replace(tmp, path)
    except BaseException as e:
        written = tree_bytes(tmp)
        Path(tmp).unlink(missing_ok=True)
        raise_if_disk_full(e, path, written=written)
        raise
    return path
