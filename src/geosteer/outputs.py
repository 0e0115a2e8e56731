"""Output folders: written whole or not at all, and never over a folder geosteer did not write.

:func:`write_folder_atomic` writes through a temporary sibling and a rename; :func:`check_output_folder` is
the one replacement rule (docs/concepts.md, "Output folders"); a reader only refuses a killed save's
leftovers (:func:`check_not_interrupted`), the next writer repairs them (:func:`recover_folder`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from geosteer.errors import ArtifactError, OutputRefused
from geosteer.io_utils import check_output_path, default_mode, raise_if_disk_full, tree_bytes
from geosteer.readers import ReadRefused, read_json

CONFIG_NAME = "geosteer_config.json"  # = geosteer.formats.CONFIG_NAME (not imported: formats reads artifacts)
CARD_NAME = "README.md"
MANIFEST_NAME = "manifest.json"  # a task folder's record (geosteer.tasks)
_KIND_FILES = (CONFIG_NAME, MANIFEST_NAME)
_MAX_CONFIG_BYTES = 16 << 20
_log = logging.getLogger("geosteer.artifacts")


def _read_doc(path: Path) -> dict | None:
    try:
        doc = read_json(path, what="config", limit=_MAX_CONFIG_BYTES)
    except ReadRefused:
        return None
    return doc if isinstance(doc, dict) else None


def folder_kind(folder: str | Path) -> str | None:
    """What geosteer wrote ``folder`` as: the ``format`` its config (or task manifest) names, e.g.
    ``geosteer-surfaces`` or ``geosteer-tasks``; None for any other folder (or one that cannot be read)."""
    for name in _KIND_FILES:
        doc = _read_doc(Path(folder) / name)
        kind = doc and (doc.get("format") or doc.get("method"))
        if isinstance(kind, str) and kind:
            return kind
    return None


FILES_KEY = "files"  # the config key listing the entries a geosteer writer put into the folder


def recorded_files(folder: str | Path) -> set[str] | None:
    """The entry names the writer recorded in ``folder``'s config (``files``); None when none is recorded."""
    doc = _read_doc(Path(folder) / CONFIG_NAME)
    files = doc.get(FILES_KEY) if doc is not None else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return {f for f in files if f and "/" not in f and f not in (".", "..")}


def _own_names(folder: Path) -> set[str]:
    """Entry names a geosteer writer recorded putting into an output folder (see the module docstring)."""
    own = {CONFIG_NAME} | (recorded_files(folder) or set())
    doc = _read_doc(folder / MANIFEST_NAME)
    if doc is not None and isinstance(doc.get("tasks"), dict):
        own |= {MANIFEST_NAME, "utils.py", "__pycache__"}
        own |= {f"{t}{ext}" for t in doc["tasks"] if isinstance(t, str) for ext in (".jsonl", ".yaml")}
    return own


def foreign_entries(folder: str | Path) -> list[str]:
    """The entries of an existing output folder that geosteer did not record writing (the user's own files,
    a nested folder of theirs): what replacing the folder would delete. Only exact recorded names count;
    a recorded nested folder counts only when it holds nothing but its own recorded files."""
    folder = Path(folder)
    own = _own_names(folder)
    out = []
    for p in sorted(folder.iterdir()):
        if p.name in own and not p.is_symlink():
            if p.is_file() or (p.is_dir() and (p.name == "__pycache__" or not foreign_entries(p))):
                continue
        out.append(p.name)
    return out


def record_files(folder: Path) -> None:
    """Write the names of ``folder``'s entries into its config's ``files`` (what a later save may replace),
    and the same into each nested artifact folder it holds (a recipe's copied surfaces)."""
    path = folder / CONFIG_NAME
    doc = _read_doc(path)
    if doc is None:
        return
    entries = sorted(folder.iterdir())
    for p in entries:
        if p.is_dir() and not p.is_symlink():
            record_files(p)
    doc[FILES_KEY] = [p.name for p in entries]
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def check_output_folder(folder: str | Path, kind: str | None, *, overwrite: bool = True,
                        what: str = "--out") -> Path:
    """Refuse, with one line, to write the output folder ``folder`` of ``kind`` where it would lose files.

    The rule of the module docstring: ``overwrite=False`` refuses any existing non-empty folder; ``kind``
    None (unknown) allows only a missing or empty one. Also refuses a path under a file or in a folder
    this user cannot write. Returns ``Path(folder)``.
    """
    folder = check_output_path(folder, what=what, folder=True)
    if folder.is_symlink() and not folder.is_dir():
        raise OutputRefused(f"{what} {folder} is a broken symbolic link; remove it or choose another folder")
    if not folder.is_dir():
        return folder
    try:
        if not any(folder.iterdir()):
            return folder
    except OSError as e:
        raise OutputRefused(f"{what} {folder} cannot be read ({e.strerror or e})") from None
    have = folder_kind(folder)
    advice = "choose a new folder, or move its files out yourself"
    if have is None or kind is None or have != kind:
        held = ", ".join(foreign_entries(folder)[:3] or [p.name for p in sorted(folder.iterdir())[:3]])
        label = f"a {have} artifact" if have else "not a geosteer output folder"
        want = f"a {kind} artifact" if kind else "a new folder"
        raise OutputRefused(f"{what} {folder} already exists and is {label} (it holds {held}, ...); geosteer "
                            f"replaces only its own folders of the same kind and writes {want} here: {advice}")
    foreign = foreign_entries(folder)
    if foreign:
        raise OutputRefused(f"{what} {folder} is a {kind} artifact but also holds files geosteer did not write "
                            f"({', '.join(foreign[:5])}; geosteer replaces only the files its config records "
                            f"writing); replacing it would delete them: {advice}")
    if not overwrite:
        raise OutputRefused(f"{what} {folder} already exists (a {kind} artifact); pass overwrite to replace it, "
                            "or choose another folder")
    _check_replaceable(folder, what)
    return folder


_NOT_PERMITTED = (errno.EPERM, errno.EACCES, errno.EROFS)


def _check_replaceable(folder: Path, what: str) -> None:
    """Refuse, with one line, a folder this process cannot change (immutable, read-only, another user's): a
    probe file is created in it and removed."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".geosteer-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if e.errno not in _NOT_PERMITTED:
            raise
        raise OutputRefused(f"{what} {folder} cannot be replaced ({e.strerror}: an immutable or read-only "
                            "folder); nothing was changed: choose another folder") from None


_TMP_PID = re.compile(r"\.tmp-(\d+)-")
_STALE_S = 3600  # a temporary folder without a PID in its name (older geosteer) is stray after an hour


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another thread of this process may be saving right now
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def recover_folder(folder: str | Path) -> list[str]:
    """Repair what a killed :func:`write_folder_atomic` left beside ``folder``; return what was done.

    A missing folder gets back the newest ``.NAME.old-PID`` of a dead process; other leftovers of dead
    processes are removed (each logged as a warning); a running process's folders are left alone.
    """
    folder = Path(folder)
    parent, name = folder.parent, folder.name
    if not name or not parent.is_dir():
        return []
    done: list[str] = []
    prefix = f".{name}."
    olds, tmps = [], []
    for p in parent.iterdir():
        if not p.name.startswith(prefix) or not p.is_dir():
            continue
        rest = p.name[len(prefix):]
        if rest.startswith("old-") and rest[4:].isdigit():
            if not _pid_alive(int(rest[4:])):
                olds.append(p)
        elif rest.startswith("tmp-"):
            m = _TMP_PID.match("." + rest)
            stale = (not _pid_alive(int(m.group(1)))) if m else (time.time() - p.stat().st_mtime > _STALE_S)
            if stale:
                tmps.append(p)
    olds.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    if olds and not folder.exists():
        os.replace(olds[0], folder)
        done.append(f"restored {folder} from {olds[0].name}, left by a save that was killed between its "
                    "two renames")
        olds = olds[1:]
    for p in olds + tmps:
        shutil.rmtree(p, ignore_errors=True)
        done.append(f"removed {p}, left behind by a killed save of {folder}")
    for msg in done:
        _log.warning("warning: %s", msg)
    return done


def check_not_interrupted(folder: str | Path) -> None:
    """For readers, which never write: refuse with one line when ``folder`` is missing because a save was
    killed between its two renames (its previous copy is hidden beside it as ``.NAME.old-PID``)."""

    folder = Path(folder)
    if folder.exists() or not folder.name or not folder.parent.is_dir():
        return
    prefix = f".{folder.name}.old-"
    try:
        olds = [p for p in folder.parent.iterdir() if p.name.startswith(prefix) and p.name[len(prefix):].isdigit()
                and p.is_dir() and not _pid_alive(int(p.name[len(prefix):]))]
    except OSError:
        return
    if olds:
        newest = max(olds, key=lambda p: p.stat().st_mtime)
        raise ArtifactError(f"{folder} is missing: a save of it was killed, and its previous copy is in "
                            f"{newest}; rename that folder to {folder.name} to restore it (or save again)")


def _settle(tmp: Path) -> None:
    """fsync the filled folder's files and give everything in it the umask's modes (some writers, e.g.
    safetensors, create owner-only 0600 files; a colleague or a web server could not read them)."""
    file_mode, dir_mode = default_mode(), default_mode(folder=True)
    for p in tmp.rglob("*"):
        if p.is_symlink():
            continue
        if p.is_dir():
            os.chmod(p, dir_mode)
        elif p.is_file():
            os.chmod(p, dir_mode if p.stat().st_mode & stat.S_IXUSR else file_mode)
            if p.parent == tmp:
                with open(p, "rb") as fh:
                    os.fsync(fh.fileno())


def write_folder_atomic(folder: str | Path, fill: Callable[[Path], None], overwrite: bool = True,
                        kind: str | None = None) -> Path:
    """Create ``folder`` by calling ``fill(tmp)`` on a temporary sibling, then renaming it into place.

    ``kind``: the format ``fill`` writes (default: read from the filled config or manifest). The folder is
    replaced only as :func:`check_output_folder` allows (before ``fill`` and before the rename); a crash in
    ``fill`` leaves the previous folder untouched. Modes follow the user's umask.
    """
    folder = Path(folder)
    recover_folder(folder)
    if kind is not None:
        check_output_folder(folder, kind, overwrite=overwrite, what="output folder")
    else:
        check_output_path(folder, what="output folder", folder=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-{os.getpid()}-", dir=folder.parent))
    old: Path | None = None
    try:
        os.chmod(tmp, default_mode(folder=True))
        fill(tmp)
        record_files(tmp)
        _settle(tmp)
        check_output_folder(folder, kind or folder_kind(tmp), overwrite=overwrite, what="output folder")
        if folder.exists():
            old = folder.parent / f".{folder.name}.old-{os.getpid()}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(folder, old)
        os.replace(tmp, folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as e:
        if old is not None and old.exists() and not folder.exists():
            os.replace(old, folder)  # the new folder could not be put in place: the old one goes back
        written = tree_bytes(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        raise_if_disk_full(e, folder, written=written)  # a full disk: one line naming the folder and the space
        if isinstance(e, OSError) and e.errno in _NOT_PERMITTED:
            raise OutputRefused(f"output folder {folder} cannot be written or replaced ({e.strerror}); nothing "
                                "was changed: choose another folder") from None
        raise
    return folder
