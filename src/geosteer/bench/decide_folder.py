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
# what the report writes beside them (replaced on every report)
REPORT_FILES = ("records.csv", "concepts.csv", "units.csv", "training.csv", "axbench_view.csv", "results.json",
                "verdict.txt", "frontier.html")
CONTEXT_KEYS = ("fingerprint", "concept", "kind", "direction", "seed", "admission", "keyword_probe", "prompts",
                "stock")
LEVER_KEYS = ("fingerprint", "lever", "levels", "params", "cpu_seconds", "train_cpu_seconds")
MAX_FILES = 100_000  # measured files a run folder may hold
STALE_TMP_SECONDS = 120  # an atomic write's temporary file older than this belongs to a killed run
REMEASURE = "delete it to measure it again"  # what a bad measured file's line ends with
# the state file records the folder's design: deleting it leaves measured files no run may resume
RESTORE_STATE = "it records this folder's design: restore it, or give a new --out"
_TMP = re.compile(r"^\.(?P<name>.+\.(?:json|csv|txt|html))\.[A-Za-z0-9_]{8}\.tmp$")  # tempfile.mkstemp's names


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


def read_sealed(path: Path, keys: tuple[str, ...] = (), remedy: str = REMEASURE) -> dict:
    """The sealed file ``path`` (bounded reader), its checksum verified and ``keys`` present; else one line
    ending in ``remedy``."""
    try:
        doc = read_json(path, what="run file")
    except ReadRefused as e:
        raise GeosteerError(f"{e}; {remedy}") from None
    if not isinstance(doc, dict):
        raise GeosteerError(f"run file {path} is not a JSON object; {remedy}")
    want = doc.pop(SUM_KEY, None)
    if not isinstance(want, str):
        raise GeosteerError(f"run file {path} carries no checksum (not written by this version of geosteer); "
                            f"{remedy}")
    if hashlib.sha256(_canonical(doc)).hexdigest() != want:
        raise GeosteerError(f"run file {path} was changed after it was written (its checksum does not match); "
                            f"{remedy}")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise GeosteerError(f"run file {path} has no {missing[0]!r}; {remedy}")
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


def _content(concepts):
    """A concepts record without its files' names: the same bytes given by another path are the same concepts."""
    if not isinstance(concepts, dict):
        return concepts
    doc = {k: v for k, v in concepts.items() if k != "source" or v == "bundled"}
    return {**doc, "file": _content(doc["file"])} if isinstance(doc.get("file"), dict) else doc


def _same(key: str, have, want) -> bool:
    """Whether the folder's ``have`` of ``key`` is this run's ``want`` (models: the same weights by name;
    concept files: the same bytes, whatever path names them)."""
    if key in RECORDED_DEFAULTS and isinstance(have, str) and isinstance(want, str):
        from geosteer.models.identity import same_model

        return same_model(have, want)
    if key == "concepts":
        have, want = _content(have), _content(want)
    return json.loads(json.dumps(have)) == json.loads(json.dumps(want))


def _describe(key: str, value, other=None) -> str:
    """``value`` of ``key`` in a refusal; a design by the sizes that differ from ``other``'s."""
    if key == "concepts" and isinstance(value, dict):
        def one(doc: dict) -> str:
            return f"{doc.get('source')} (SHA-256 {str(doc.get(SUM_KEY, ''))[:12]})"

        file = value.get("file")
        if isinstance(file, dict):
            return f"{one(value)} + {one(file)}"
        return one(value) if value.get("source") == "bundled" else f"{one(value)} alone"
    if key == "design" and isinstance(value, dict):
        other = json.loads(json.dumps(other)) if isinstance(other, dict) else {}
        shown = [(k, v) for k, v in sorted(json.loads(json.dumps(value)).items())
                 if k != "seeds" and (not other or other.get(k) != v)]
        return "sizes " + (", ".join(f"{k}={json.dumps(v)}" for k, v in shown) or "(none of its own)")
    return json.dumps(value)


def check_state(out: Path, state_file: str, want: dict | None) -> dict | None:
    """The folder's recorded state (None for a new folder); a run of another design than ``want`` (a
    :func:`state_doc`; None: any) is refused naming what differs."""
    path = Path(out) / state_file
    if not path.exists() and not path.is_symlink():
        return None
    have = read_sealed(path, remedy=RESTORE_STATE)
    if have.get("format") != STATE_FORMAT or have.get("version") != STATE_VERSION:
        raise GeosteerError(f"--out {out}: its {state_file} is not a run record of this version of geosteer "
                            "(it records no design); give a new --out")
    if want is not None:
        for key in _SAME:
            there = have.get(key, RECORDED_DEFAULTS.get(key))
            if not _same(key, there, want[key]):
                raise GeosteerError(
                    f"--out {out} holds a run of another design: {key} {_describe(key, there, want[key])} there, "
                    f"{_describe(key, want[key], there)} here; one folder holds one design: give a new --out")
    return have


_CLAIMED: dict[str, int] = {}  # run folders this process holds: resolved path -> the locked descriptor


def claim(out: Path) -> None:
    """Hold the run folder ``out`` (created if new) for this process until it ends, killed or not (an
    exclusive lock on the folder): a second run into the same folder at the same time is refused in one line."""
    import fcntl

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    key = str(out.resolve())
    if key in _CLAIMED:
        return
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise GeosteerError(f"--out {out}: another run of bench decide is writing this folder now; wait for it "
                            "to end, or give another --out") from None
    _CLAIMED[key] = fd


def record_state(out: Path, state_file: str, want: dict, have: dict | None) -> None:
    """Claim the folder (:func:`claim`) and write its state: ``want``, with the seeds and exploratory forms of
    earlier runs kept (read again once the folder is held)."""
    doc = dict(want)
    try:
        claim(out)
    except OSError as e:
        raise GeosteerError(f"--out {out}: cannot write there ({e.strerror or e}); give a folder this user can "
                            "write") from None
    path = Path(out) / state_file
    have = read_sealed(path, remedy=RESTORE_STATE) if path.is_file() else have
    if have is not None:
        doc["seeds"] = sorted(set(have.get("seeds", [])) | set(want["seeds"]))
        doc["explore"] = list(dict.fromkeys([*have.get("explore", []), *want["explore"]]))
    try:
        write_sealed(path, doc)
    except OSError as e:
        from geosteer.errors import is_disk_full

        if is_disk_full(e):
            raise
        raise GeosteerError(f"--out {out}: cannot write its {state_file} ({e.strerror or e}); give a folder "
                            "this user can write") from None


def _measured_files(out: Path) -> list[Path]:
    files: list[Path] = []
    for folder in MEASURED:
        root = out / folder
        if not root.is_dir():
            continue
        for base, dirs, names in os.walk(root):
            odd = [d for d in dirs if d.endswith(".json")]
            if odd:
                raise GeosteerError(f"run file {Path(base) / odd[0]} is a folder, not a file; delete it to measure "
                                    "it again")
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
    taken = next((out / n for n in REPORT_FILES if (out / n).is_dir()), None)
    if taken is not None:  # else the report would stop half written
        raise GeosteerError(f"--out {out}: {taken} is a folder where the report writes its {taken.name}; move it "
                            "out of the run folder")
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
