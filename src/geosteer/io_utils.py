"""Atomic file writes (temp file in the same folder + fsync + rename): no half-written results."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from geosteer.errors import DiskFull, GeosteerError, is_disk_full
from geosteer.readers import ReadRefused
from geosteer.readers import read_json as bounded


def read_json(path: str | Path, what: str, error: type[Exception] | None = None):
    """The JSON document at ``path``, read by the bounded reader (:func:`geosteer.readers.read_json`: a
    regular file, size and nesting caps, no lone surrogates); a missing file or anything it refuses raises
    ``error`` (default :class:`geosteer.errors.GeosteerError`) with one line that names ``what`` / the file."""

    error = error or GeosteerError
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise error(f"{what} not found: {p}")
    try:
        return bounded(p, what=what)
    except ReadRefused as e:
        if error is GeosteerError:
            raise
        raise error(str(e)) from None


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux: /proc), else set and reset."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode(folder: bool = False) -> int:
    """The mode a plain ``open``/``mkdir`` would give a new file (0666) or folder (0777) under the umask."""
    return (0o777 if folder else 0o666) & ~current_umask()


_RECORD_SUFFIXES = (".json", ".csv")


def link_leaving(folder: str | Path, roots: Iterable[Path], limit: int) -> Path | None:
    """The first symlink under ``folder`` that resolves outside every root, else None; a walk of at most
    ``limit`` entries (a ``ValueError`` past that)."""
    roots = list(roots)
    entries = (Path(base) / name for base, dirs, files in os.walk(folder) for name in dirs + files)
    for seen, q in enumerate(entries, 1):
        if seen > limit:
            raise ValueError(f"{folder} holds more than {limit} files")
        if q.is_symlink() and not any(q.resolve().is_relative_to(r) for r in roots):
            return q
    return None


def check_output_path(path: str | Path, *, what: str = "--out", suffixes: Iterable[str] | None = None,
                      folder: bool = False) -> Path:
    """Refuse, with one line, an output path that cannot be written, before any work is done: ``path`` is
    an existing folder where a file is meant (or a file where a folder is meant), a folder meant where a
    link to nothing is, lies under a file or a link to nothing, lies in a folder this user cannot write,
    ends in a suffix outside ``suffixes`` (e.g. ``(".json", ".csv")``), or cannot be looked up (a name
    too long). Missing parent folders are fine (the writers create them). Returns ``Path(path)``."""

    path = Path(path)
    try:
        _check_output_path(path, what, suffixes, folder)
    except OSError as e:  # a name too long, a loop of links, a folder that cannot be read...
        shown = str(path) if len(str(path)) <= 120 else str(path)[:117] + "..."
        raise GeosteerError(f"{what} {shown}: cannot write there ({e.strerror or e})") from None
    return path


def _check_output_path(path: Path, what: str, suffixes: Iterable[str] | None, folder: bool) -> None:
    if path.is_dir() and not folder:
        raise GeosteerError(f"{what} {path} is a folder; give a file name")
    if suffixes is not None:
        valid = tuple(s.lower() for s in suffixes)
        if path.suffix.lower() not in valid:
            raise GeosteerError(f"{what} {path}: cannot write a '{path.suffix or '(no extension)'}' file; "
                                f"valid extensions: {', '.join(valid)}")
    if path.exists() and not path.is_dir() and folder:
        raise GeosteerError(f"{what} {path} is a file, not a folder")
    if folder and path.is_symlink() and not path.exists():
        raise GeosteerError(f"{what} {path} is a link to {os.readlink(path)}, which does not exist; give a "
                            "folder, or a name that is not taken")
    for parent in path.absolute().parents:
        if parent.is_dir():
            if not os.access(parent, os.W_OK | os.X_OK):
                raise GeosteerError(f"{what} {path}: cannot write into {parent} (permission denied)")
            break
        if parent.is_symlink() and not parent.exists():
            raise GeosteerError(f"{what} {path} lies under {parent}, a link to {os.readlink(parent)}, which "
                                "does not exist")
        if parent.exists():
            raise GeosteerError(f"{what} {path} lies under {parent}, which is a file, not a folder")


def check_resumable_folder(path: str | Path, marker: str, what: str = "--out") -> Path:
    """:func:`check_output_path` for a run's folder, which must also be new, empty, or an earlier run's (it
    holds the file ``marker``), so that a resumed run never writes over a user's own files, and lie outside
    the installed geosteer package (which an upgrade replaces)."""
    path = check_output_path(path, what=what, folder=True)
    package = Path(__file__).resolve().parent  # this module is at the package's top
    if path.resolve().is_relative_to(package):
        raise GeosteerError(f"{what} {path} lies inside the installed geosteer package ({package}), which an "
                            "upgrade or reinstall replaces; give a folder outside it")
    if path.is_dir() and any(path.iterdir()) and not (path / marker).is_file():
        raise GeosteerError(f"{what} {path} holds files of its own and no {marker}: give a new or empty "
                            "folder, or an earlier run's folder to resume it")
    return path


def check_records_path(path: str | Path, what: str = "--out") -> Path:
    """:func:`check_output_path` for tidy records (``.json`` or ``.csv``, what :func:`write_records` writes)."""
    return check_output_path(path, what=what, suffixes=_RECORD_SUFFIXES)


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the disk that holds ``path`` (its nearest existing folder); None if unknown."""
    for p in (Path(path).absolute(), *Path(path).absolute().parents):
        if p.is_dir():
            try:
                return shutil.disk_usage(p).free
            except OSError:
                return None
    return None


def human_bytes(n: int) -> str:
    """``n`` bytes as a short text (``1.5 MB``)."""
    for unit in ("bytes", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover - unreachable


def tree_bytes(path: str | Path) -> int:
    """Bytes of the regular files at or under ``path`` (links not followed); 0 when there is nothing."""
    p = Path(path)
    try:
        if p.is_file() and not p.is_symlink():
            return p.stat().st_size
        return sum(q.stat().st_size for q in p.rglob("*") if q.is_file() and not q.is_symlink())
    except OSError:
        return 0


def raise_if_disk_full(e: BaseException, path: str | Path, *, needed: int | None = None,
                       written: int | None = None) -> None:
    """Inside a writer's ``except`` (after its temporary files are removed): turn a full disk (``e``,
    :func:`geosteer.errors.is_disk_full`) into :class:`geosteer.errors.DiskFull` naming ``path`` and the
    space: ``needed`` bytes (known in advance) or more than ``written`` (what went in before it filled)."""

    if isinstance(e, DiskFull) or not is_disk_full(e):
        return
    free = free_bytes(path)
    have = f"{human_bytes(free)} free there" if free is not None else "the free space is unknown"
    if needed is not None:
        need = f"it needs {human_bytes(needed)}, {have}"
    elif written:
        need = f"it needs more than the {human_bytes(written)} written before the disk filled, {have}"
    else:
        need = have
    raise DiskFull(f"no space left on device writing {path}: {need}; nothing half-written was left and what "
                   "was there is kept: free some space (or write somewhere else) and run again") from None


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary sibling + fsync + rename. The file gets the mode a plain
    ``open`` would give it (0644 under umask 022), or keeps the mode of the file it replaces."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise_if_disk_full(e, path, needed=len(data))
        raise
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = default_mode()
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        raise_if_disk_full(e, path, needed=len(data))
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, default=_default) + "\n")


def atomic_write_csv(path: str | Path, rows: Iterable[dict]) -> Path:
    rows = list(rows)
    buf = io.StringIO()
    fields: list[str] = []
    for r in rows:
        for k in r:
            if k not in fields:
                fields.append(k)
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
    return atomic_write_text(path, buf.getvalue())


def write_records(path: str | Path, rows: list[dict], meta: dict | None = None) -> Path:
    """Tidy records to ``.csv`` (rows only) or ``.json`` (``{"meta": ..., "rows": [...]}``); any other
    extension is refused (one line naming the valid ones) rather than written as JSON under a wrong name."""
    path = check_records_path(path, what="records file")
    if path.suffix.lower() == ".csv":
        return atomic_write_csv(path, rows)
    return atomic_write_json(path, {"meta": meta or {}, "rows": rows})


def _default(o):
    try:
        import torch

        if isinstance(o, torch.Tensor):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
