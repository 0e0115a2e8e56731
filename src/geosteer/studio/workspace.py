"""What the studio sees in its workspace: the surfaces artifacts it can open and the broken folders (with why),
and the names it saves and loads under (plain names that stay inside it; a symlink loop is a one-line refusal).

Only regular files are read, non-blocking and size-capped (:func:`geosteer.readers.read_bytes`).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from geosteer.errors import GeosteerError
from geosteer.formats import CONFIG_NAME, MAX_CONFIG_BYTES
from geosteer.studio import bankio

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # matched whole (fullmatch)


def safe_child(root: Path, name: str, what: str = "name") -> Path:
    """``root / name`` for a plain name (letters, digits, . _ -, no path separators, not '.'/'..')."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or name in (".", "..") or ".." in name:
        raise ValueError(f"invalid {what} {name!r}: use 1–64 letters, digits, '.', '_' or '-' "
                         "(starting with a letter or digit, no '..', no '/')")
    root = root.resolve()
    try:
        p = (root / name).resolve()
    except (RuntimeError, OSError):  # a symlink loop: RuntimeError up to Python 3.12, OSError (ELOOP) after
        raise ValueError(f"invalid {what} {name!r}: it is a symlink that loops back on itself in the "
                         "workspace; remove it or choose another name") from None
    if p.parent != root:
        raise ValueError(f"invalid {what} {name!r}: must stay inside the workspace")
    return p


def resolved_workspace(workspace: Path) -> Path:
    """The workspace's real path; a symlink loop on the way is a one-line :class:`GeosteerError`."""
    try:
        return workspace.resolve()
    except (RuntimeError, OSError):
        raise GeosteerError(f"workspace {workspace} is a symlink that loops back on itself") from None


def entries(workspace: Path) -> list[Path]:
    """The workspace's entries, sorted; none when it is gone (moved, removed, replaced by a file)."""
    try:
        return sorted(p for p in workspace.iterdir() if not p.name.startswith("."))
    except OSError:
        return []


def config_kind_problem(folder: Path) -> str | None:
    """Why ``folder``'s config must not be read at all (not a regular file, too large), or None."""
    try:
        st = os.stat(folder / CONFIG_NAME)
    except OSError:
        return f"{CONFIG_NAME} cannot be read"
    if not stat.S_ISREG(st.st_mode):
        return f"{CONFIG_NAME} is not a regular file"
    if st.st_size > MAX_CONFIG_BYTES:
        return f"{CONFIG_NAME} is larger than {MAX_CONFIG_BYTES >> 20} MiB; a geosteer config is not"
    return None


def list_artifacts(workspace: Path) -> list[str]:
    """Names of the surfaces artifacts in the workspace (what ``/api/load`` opens)."""
    return [p.name for p in entries(workspace) if p.is_dir() and bankio.is_artifact(p)]


def list_broken(workspace: Path, cache: dict) -> list[dict]:
    """Workspace folders with a config the studio cannot read: ``{"name", "error"}`` with the one-line
    reason. ``cache`` maps (name, mtime, size) to the reason, so polling reads each changed config once."""
    out = []
    for p in entries(workspace):
        if not os.path.lexists(p / CONFIG_NAME):
            continue
        problem = config_kind_problem(p)
        if problem is None:
            st = (p / CONFIG_NAME).stat()
            key = (p.name, st.st_mtime_ns, st.st_size)
            if key not in cache:
                if len(cache) > 256:
                    cache.clear()
                cache[key] = bankio.config_problem(p)
            problem = cache[key]
        if problem is not None:
            out.append({"name": p.name, "error": problem})
    return out
