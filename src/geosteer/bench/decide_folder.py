"""The run folder of ``geosteer bench decide``: the design it records, its checksummed files, their checks.

A run folder holds ``decide_state.json`` (the whole design: the model and its fluency reader, the concepts
files' sources and SHA-256, the sizes, KL levels and learning-rate grid, the matched levers and the exploratory forms
asked for, the seeds run so far) and the measured files (``units/``, ``dev/``, ``admission_titles.json``,
``learning_rates.json``). Every file is written sealed (a SHA-256 of its content inside it) and checked when
read: a run of another design, a changed, truncated or unreadable file, a pipe or a device in place of a file
are refused in one line naming the file, before any model loads. A resumed run first removes the temporary
files of its own writes that a killed run left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

from geosteer.errors import GeosteerError
from geosteer.io_utils import atomic_write_text
from geosteer.readers import ReadRefused, read_json

STATE_FORMAT = "geosteer-decide-state"
STATE_VERSION = 3  # 3: each seed redraws a concept's lever texts, test prompts and judge texts
SUM_KEY = "sha256"
MEASURED = ("units", "dev")  # folders of measured (concept, seed) files: <folder>/<concept>/s<seed>/*.json
TOP_FILES = ("admission_titles.json", "learning_rates.json")
CONTEXT_KEYS = ("fingerprint", "concept", "kind", "direction", "seed", "admission", "keyword_probe", "prompts",
                "stock")
LEVER_KEYS = ("fingerprint", "lever", "levels", "params", "cpu_seconds", "train_cpu_seconds")
MAX_FILES = 100_000  # measured files a run folder may hold
STALE_TMP_SECONDS = 120  # an atomic write's temporary file older than this belongs to a killed run
_TMP = re.compile(r"^\.(?P<name>.+\.(?:json|csv|txt))\.[A-Za-z0-9_]{8}\.tmp$")  # tempfile.mkstemp's names


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=True).encode("utf-8")


def seal(doc: dict) -> str:
    """``doc`` as the JSON text of a sealed file (its SHA-256 under :data:`SUM_KEY`)."""
    body = json.loads(json.dumps({k: v for k, v in doc.items() if k != SUM_KEY}, allow_nan=True))
    return json.dumps({**body, SUM_KEY: hashlib.sha256(_canonical(body)).hexdigest()}, indent=1,
                      allow_nan=True) + "\n"


def write_sealed(path: Path, doc: dict) -> None:
    """Write ``doc`` sealed and atomically (parent folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, seal(doc))


def read_sealed(path: Path, keys: tuple[str, ...] = ()) -> dict:
    """The sealed file ``path`` (bounded reader), its checksum verified and ``keys`` present; else one line."""
    try:
        doc = read_json(path, what="run file")
    except ReadRefused as e:
        raise GeosteerError(f"{e}; delete it to measure it again") from None
    if not isinstance(doc, dict):
        raise GeosteerError(f"run file {path} is not a JSON object; delete it to measure it again")
    want = doc.pop(SUM_KEY, None)
    if not isinstance(want, str):
        raise GeosteerError(f"run file {path} carries no checksum (not written by this version of geosteer); "
                            "delete it to measure it again")
    if hashlib.sha256(_canonical(doc)).hexdigest() != want:
        raise GeosteerError(f"run file {path} was changed after it was written (its checksum does not match); "
                            "delete it to measure it again")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise GeosteerError(f"run file {path} has no {missing[0]!r}; delete it to measure it again")
    return doc


def state_doc(model: str, reader: str, concepts: dict, design: dict, levers: list[str], explore: list[str],
              seeds: list[int], draws: dict | None = None) -> dict:
    """What ``decide_state.json`` records (module docstring); ``draws``: what a seed redraws and from which pools
    (:func:`geosteer.bench.decide_draw.record`)."""
    return {"format": STATE_FORMAT, "version": STATE_VERSION, "model": model, "reader": reader,
            "concepts": concepts, "design": design, "levers": list(levers), "explore": list(explore),
            "seeds": list(seeds), "draws": draws}


_SAME = ("model", "reader", "concepts", "design", "levers", "draws")  # what a resumed run must share with the folder's


# what a state written before a key was recorded measured: the steered model and reader were fixed then
RECORDED_DEFAULTS = {"model": "smollm2", "reader": "gemma3-270m"}


def _same(key: str, have, want) -> bool:
    """Whether the folder's ``have`` of ``key`` is this run's ``want`` (models: the same weights by name)."""
    if key in RECORDED_DEFAULTS and isinstance(have, str) and isinstance(want, str):
        from geosteer.models.identity import same_model

        return same_model(have, want)
    return json.loads(json.dumps(have)) == json.loads(json.dumps(want))


def _describe(key: str, value) -> str:
    if key == "concepts" and isinstance(value, dict):
        def one(doc: dict) -> str:
            return f"{doc.get('source')} (SHA-256 {str(doc.get(SUM_KEY, ''))[:12]})"

        file = value.get("file")
        if isinstance(file, dict):
            return f"{one(value)} + {one(file)}"
        return one(value) if value.get("source") == "bundled" else f"{one(value)} alone"
    if key == "design" and isinstance(value, dict):
        return "sizes " + ", ".join(f"{k}={v}" for k, v in sorted(value.items()) if k != "seeds")
    return json.dumps(value)


def check_state(out: Path, state_file: str, want: dict | None) -> dict | None:
    """The folder's recorded state (None for a new folder); a run of another design than ``want`` (a
    :func:`state_doc`; None: any) is refused naming what differs."""
    path = Path(out) / state_file
    if not path.exists() and not path.is_symlink():
        return None
    have = read_sealed(path)
    if have.get("format") != STATE_FORMAT or have.get("version") != STATE_VERSION:
        raise GeosteerError(f"--out {out}: its {state_file} is not a run record of this version of geosteer "
                            "(it records no design); give a new --out")
    if want is not None:
        for key in _SAME:
            if not _same(key, have.get(key, RECORDED_DEFAULTS.get(key)), want[key]):
                raise GeosteerError(
                    f"--out {out} holds a run of another design: {key} "
                    f"{_describe(key, have.get(key, RECORDED_DEFAULTS.get(key)))} there, "
                    f"{_describe(key, want[key])} here; one folder holds one design: give a new --out")
    return have


def record_state(out: Path, state_file: str, want: dict, have: dict | None) -> None:
    """Write the folder's state: ``want``, with the seeds and exploratory forms of earlier runs kept."""
    doc = dict(want)
    if have is not None:
        doc["seeds"] = sorted(set(have.get("seeds", [])) | set(want["seeds"]))
        doc["explore"] = list(dict.fromkeys([*have.get("explore", []), *want["explore"]]))
    write_sealed(Path(out) / state_file, doc)


def _measured_files(out: Path) -> list[Path]:
    files: list[Path] = []
    for folder in MEASURED:
        root = out / folder
        if not root.is_dir():
            continue
        for base, _dirs, names in os.walk(root):
            files += [Path(base) / n for n in names if n.endswith(".json")]
            if len(files) > MAX_FILES:
                raise GeosteerError(f"--out {out}: {root} holds more than {MAX_FILES} files; not a run folder")
    return sorted(files)


def check_files(out: Path, version: int | None = None) -> int:
    """Read every measured file of the run folder ``out`` and verify it (:func:`read_sealed`), and, given
    ``version``, that it was measured by that unit version (an earlier one's units are never pooled with these);
    their count."""
    out = Path(out)
    files = _measured_files(out)
    for p in files:
        doc = read_sealed(p, CONTEXT_KEYS if p.name == "context.json" else LEVER_KEYS)
        fp = doc.get("fingerprint")
        got = fp.get("version") if isinstance(fp, dict) else None
        if version is not None and got != version:
            raise GeosteerError(f"run file {p} was measured by another version of bench decide (unit version "
                                f"{got}, this one {version}); its units cannot be pooled with new ones: give a new "
                                "--out")
    for name in TOP_FILES:
        p = out / name
        if p.exists() or p.is_symlink():
            read_sealed(p)
    return len(files)


def remove_stale_tmp(out: Path, older_than: float = STALE_TMP_SECONDS) -> list[Path]:
    """Remove the temporary files of atomic writes (``.<name>.json.XXXXXXXX.tmp``) that a killed run left in
    ``out`` and its measured folders, when older than ``older_than`` seconds; what was removed."""
    out = Path(out)
    roots = [out] + [out / f for f in MEASURED if (out / f).is_dir()]
    now, gone = time.time(), []
    for root in roots:
        walk = [(str(root), [], os.listdir(root))] if root == out else os.walk(root)
        for base, _dirs, names in walk:
            for n in names:
                p = Path(base) / n
                if _TMP.match(n) and p.is_file() and not p.is_symlink() and now - p.stat().st_mtime > older_than:
                    p.unlink(missing_ok=True)
                    gone.append(p)
    return gone
