"""Users' benchmarks: AxBench concept files (stanfordnlp/axbench: Concept10, Concept500, Concept16K) as geosteer
concepts.

An AxBench file is a table of rows ``{"input": an instruction, "output": a response, "output_concept": the
concept's description, "concept_genre": "text"|"code"|"math", "category": "positive"|"negative"|"hard negative",
"dataset_category": "instruction"|"continuation", "concept_id": int}``: ``generate/train_data.parquet`` (whose
negative rows are one pool shared by every concept: ``concept_id`` -1, ``output_concept`` "EEEEE") or
``inference/latent_eval_data.parquet`` (each concept with negatives of its own), or the same rows as .jsonl / .json.

Each concept (rows grouped by ``concept_id``, or by ``output_concept`` in a file without ids) becomes
``{"name", "direction": "promote", "description": its output_concept, "positive": the outputs of its positive
rows, "negative": the outputs of its negative and hard-negative rows and of the shared pool's rows of its genre
(all of the pool when none is of its genre), "prompts": the inputs of its rows, "groups": each text's request}``;
texts once each, blank ones dropped. A text's group is the ``input`` it answers: AxBench writes several outputs
for one input, so ``bench decide`` holds out whole requests (inputs that share an output text are one group,
named by the first of them in sort order; only that one is a prompt, so each prompt names its request's
group). A malformed file (a row without one of the required columns, an empty ``input``) is refused in one
line naming the file, the row and what is valid.
"""

from __future__ import annotations

import re
from pathlib import Path

from geosteer.errors import GeosteerError
from geosteer.readers import ReadRefused, check_regular, parse_json, read_text

SHARED_ID = -1
EMPTY_CONCEPT = "EEEEE"  # AxBench's output_concept of the shared negative rows
CATEGORIES = ("positive", "negative", "hard negative")
SUFFIXES = (".jsonl", ".json", ".parquet")
ROW = ('rows {"input": str, "output": str, "output_concept": str, "category": "positive"|"negative"|'
       '"hard negative", optional "concept_id": int, optional "concept_genre": str}')
MAX_PARQUET_BYTES = 4 << 30  # AxBench's largest table (Concept16K) is well under this
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _rows_jsonl(p: Path, text: str) -> list:
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append((f"line {i}", parse_json(line, f"{p} line {i}", what="AxBench file")))
            except ReadRefused as e:
                raise GeosteerError(f"{e}; expected one row a line: {ROW}") from None
    return rows


def _rows_json(p: Path, text: str) -> list:
    try:
        doc = parse_json(text, p, what="AxBench file")
    except ReadRefused as e:
        raise GeosteerError(f"{e}; expected a JSON list of {ROW}") from None
    if not isinstance(doc, list):
        raise GeosteerError(f"{p}: expected a JSON list of {ROW} (got a {type(doc).__name__})")
    return [(f"row {i}", r) for i, r in enumerate(doc)]


def _rows_parquet(p: Path) -> list:
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise GeosteerError(f"{p}: reading .parquet needs the package 'pyarrow', which is not installed: "
                            "pip install pyarrow (or convert the file to .jsonl)") from None
    try:
        table = pq.read_table(p)
    except Exception as e:  # pyarrow's errors (ArrowInvalid, OSError) for a file that is not parquet
        raise GeosteerError(f"{p} is not a readable parquet file ({type(e).__name__}: {e})".splitlines()[0]) from None
    return [(f"row {i}", r) for i, r in enumerate(table.to_pylist())]


def _read_rows(path: str | Path) -> tuple[Path, list]:
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise GeosteerError(f"{p}: an AxBench file is .jsonl, .json or .parquet (got {p.suffix or 'no suffix'!r})")
    if not p.exists() and not p.is_symlink():
        raise GeosteerError(f"{p}: no such file; expected an AxBench file (.jsonl, .json or .parquet) of {ROW}")
    try:
        if p.suffix.lower() == ".parquet":
            check_regular(p, what="AxBench file", limit=MAX_PARQUET_BYTES)
            return p, _rows_parquet(p)
        text = read_text(p, what="AxBench file")
    except ReadRefused as e:
        raise GeosteerError(f"{e}; expected {ROW}") from None
    return p, (_rows_jsonl(p, text) if p.suffix.lower() == ".jsonl" else _rows_json(p, text))


def _check_row(p: Path, where: str, row) -> dict:
    if not isinstance(row, dict):
        raise GeosteerError(f"{p}: {where} is a {type(row).__name__}, not an object; expected {ROW}")
    for key in ("input", "output", "output_concept", "category"):
        if key not in row or row[key] is None:
            raise GeosteerError(f"{p}: {where} has no {key!r}; expected {ROW}")
        if not isinstance(row[key], str):
            raise GeosteerError(f"{p}: {where}: {key!r} is a {type(row[key]).__name__}, not a string; "
                                f"expected {ROW}")
    if not row["input"].strip():
        raise GeosteerError(f"{p}: {where}: 'input' is empty; each row's input is the request its output answers "
                            f"(a request's texts are held out together); expected {ROW}")
    if row["category"] not in CATEGORIES:
        raise GeosteerError(f"{p}: {where}: category {row['category']!r} is not one of "
                            f"{', '.join(CATEGORIES)}")
    cid = row.get("concept_id")
    if cid is not None and (isinstance(cid, bool) or not isinstance(cid, int)):
        raise GeosteerError(f"{p}: {where}: concept_id {cid!r} is not an integer; expected {ROW}")
    genre = row.get("concept_genre")
    if genre is not None and not isinstance(genre, str):
        raise GeosteerError(f"{p}: {where}: concept_genre {genre!r} is not a string; expected {ROW}")
    return row


def _key(row: dict):
    """The concept a row belongs to (None: the shared negative pool)."""
    cid = row.get("concept_id")
    if cid == SHARED_ID or row["output_concept"] == EMPTY_CONCEPT:
        return None
    return ("id", cid) if cid is not None else ("concept", row["output_concept"])


def _unique(texts) -> list[str]:
    return list(dict.fromkeys(t for t in texts if t.strip()))


def _name(description: str, cid, taken: set[str]) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", description).strip("-._") or "concept"
    base = (f"{cid}-{slug}" if cid is not None else slug).lstrip("-._")[:64].rstrip("-._") or "concept"
    name, k = base, 2
    while name in taken or not NAME.match(name):
        name = f"{base[:60].rstrip('-._') or 'concept'}-{k}"
        k += 1
    taken.add(name)
    return name


def _request_groups(sides: dict[str, list[dict]], texts: dict[str, list[str]]) -> tuple[dict[str, list[str]],
                                                                                       set[str]]:
    """(side -> the group of each of its ``texts``, the inputs merged into another's group): a text's group is
    the input its rows answer; inputs that share an output text (on either side) are one group, named by the
    least of them."""
    root: dict[str, str] = {}

    def find(x: str) -> str:
        while root.setdefault(x, x) != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    first: dict[str, str] = {}
    for r in (r for rs in sides.values() for r in rs if r["output"].strip()):
        a, b = find(first.setdefault(r["output"], r["input"])), find(r["input"])
        if a != b:
            root[max(a, b)] = min(a, b)  # the root of a group stays its least input
    return {side: [find(first[t]) for t in ts] for side, ts in texts.items()}, {x for x in root if find(x) != x}


def _concepts(rows: list[dict]) -> list[dict]:
    groups: dict = {}
    shared = []
    for r in rows:
        key = _key(r)
        (shared if key is None else groups.setdefault(key, [])).append(r)
    out, taken = [], set()
    for key, group in groups.items():
        pos = [r for r in group if r["category"] == "positive"]
        if not pos:
            continue  # negatives only (e.g. hard negatives whose concept has no positive rows here)
        genre = pos[0].get("concept_genre")
        pool = [r for r in shared if r["category"] != "positive"]
        pool = [r for r in pool if r.get("concept_genre") == genre] or pool
        description = pos[0]["output_concept"]
        neg = [r for r in group + pool if r["category"] != "positive"]
        texts = {"positive": _unique(r["output"] for r in pos), "negative": _unique(r["output"] for r in neg)}
        groups, merged = _request_groups({"positive": pos, "negative": neg}, texts)
        out.append({"name": _name(description, key[1] if key[0] == "id" else None, taken),
                    "direction": "promote", "description": description, **texts,
                    "prompts": [x for x in _unique(r["input"] for r in group) if x not in merged],
                    "groups": groups})
    return out


def _validate(p: Path, concepts: list[dict]) -> None:
    from pydantic import ValidationError

    from geosteer.bench.concepts import MIN_PROMPTS, MIN_TEXTS, file_concept_from_dict

    for c in concepts:
        try:
            file_concept_from_dict(c)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ())[1:])  # the first is the list's index
            raise GeosteerError(f"{p}: concept {c['name']!r} ({len(c['positive'])} positive, {len(c['negative'])} "
                                f"negative texts, {len(c['prompts'])} prompts): {where}: {err.get('msg')}; a "
                                f"concept needs >= {MIN_TEXTS} texts a side and >= {MIN_PROMPTS} prompts") from None


def read_axbench(path: str | Path) -> list[dict]:
    """The concepts of an AxBench file as geosteer concept dicts (module docstring), or a one-line
    :class:`GeosteerError` naming the file, the row and what is valid."""
    p, raw = _read_rows(path)
    if not raw:
        raise GeosteerError(f"{p} holds no rows; expected {ROW}")
    rows = [_check_row(p, where, r) for where, r in raw]
    concepts = _concepts(rows)
    if not concepts:
        raise GeosteerError(f"{p}: no concept has a positive row (category 'positive' with a concept_id other "
                            f"than -1); expected {ROW}")
    _validate(p, concepts)
    return concepts


def _first_row(p: Path):
    if p.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        return dict.fromkeys(pq.read_schema(check_regular(p, limit=MAX_PARQUET_BYTES)).names)
    text = read_text(p, what="AxBench file")
    if p.suffix.lower() == ".jsonl":
        return parse_json(next(line for line in text.splitlines() if line.strip()), p)
    doc = parse_json(text, p)
    return doc[0] if isinstance(doc, list) and doc else None


def is_axbench(path: str | Path) -> bool:
    """Whether ``path`` looks like an AxBench file: its first row (a parquet file's columns) has
    ``output_concept`` or ``concept_id``, or ``input`` and ``output`` (keys no geosteer concept has). Never
    raises."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES or not p.is_file():
        return False
    try:
        row = _first_row(p)
    except ImportError:
        return p.suffix.lower() == ".parquet"  # read_axbench then names what is missing
    except Exception:
        return False
    return isinstance(row, dict) and ("output_concept" in row or "concept_id" in row
                                      or ("input" in row and "output" in row))


def load_concepts(path: str | Path) -> list:
    """The concepts of a geosteer concept file, of an AxBench file, or ``bundled`` (one-line errors)."""
    from geosteer.bench.concepts import file_concept_from_dict, read_concepts

    path = Path(path)
    if str(path) == "bundled" and not path.exists():
        from importlib import resources

        return read_concepts(resources.files("geosteer.data").joinpath("bench_concepts.json"))
    if path.suffix.lower() in (".csv", ".tsv"):  # a table exported as text: no reader of ours guesses its types
        raise GeosteerError(f"{path}: a '{path.suffix}' file is not read; give geosteer's concept JSON (.json) or "
                            f"an AxBench file ({', '.join(SUFFIXES)})")
    if path.suffix.lower() in (".jsonl", ".parquet") or is_axbench(path):  # geosteer's own files are .json
        return [file_concept_from_dict(d) for d in read_axbench(path)]
    return read_concepts(path)
