"""``geosteer bench judge``: score texts with the steering benchmark's judges, so anyone can audit them.

Each concept's embedding judge is trained on the concept's judge texts (:func:`geosteer.bench.judges.judge_texts`)
and scores the given texts: every text for every concept, or a record ``{"concept", "text"}`` for its concept only.
A sentiment concept (:func:`geosteer.bench.judges.lexicon_of`) is also scored by the VADER lexicon.
"""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.bench.axbench import load_concepts
from geosteer.errors import GeosteerError
from geosteer.readers import ReadRefused, parse_json, read_text

TEXTS_SHAPE = ('a JSON list of strings or of {"concept": name, "text": str}, or a text file with one text a line')
MAX_TEXTS_BYTES = 32 * 1024 * 1024
SHOWN = 60  # characters of a text in the table


def _json_flag(value: bool) -> bool:
    from geosteer.cli.common import _json_quiets_progress

    return _json_quiets_progress(value)


# geosteer.cli.common's --json, declared here so that importing this module does not import the CLI package
# (whose import registers every verb, this one included)
JSON_OPT = typer.Option(False, "--json", help="print JSON (no progress bars)", callback=_json_flag)


def _parse_json(p: Path, doc, names: set[str]) -> list[tuple[str | None, str]]:
    if not isinstance(doc, list) or not doc:
        raise GeosteerError(f"--texts {p}: expected a non-empty list; {TEXTS_SHAPE}")
    out = []
    for i, item in enumerate(doc):
        if isinstance(item, str):
            out.append((None, item))
            continue
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or \
                not isinstance(item.get("concept"), str):
            raise GeosteerError(f"--texts {p}: item {i} is not a string or a {{\"concept\": name, \"text\": str}} "
                                f"record; expected {TEXTS_SHAPE}")
        if item["concept"] not in names:
            valid = ", ".join(sorted(names)[:20]) + (", ..." if len(names) > 20 else "")
            raise GeosteerError(f"--texts {p}: item {i} names the concept {item['concept']!r}, which the concept "
                                f"file does not have; valid: {valid}")
        out.append((item["concept"], item["text"]))
    return out


def read_texts(path: Path, names: set[str]) -> list[tuple[str | None, str]]:
    """(concept name or None for every concept, text) for each text of ``--texts`` (one-line errors)."""
    p = Path(path)
    try:
        text = read_text(p, what="--texts", limit=MAX_TEXTS_BYTES)
        as_json = p.suffix.lower() == ".json"
        if as_json or text.lstrip().startswith("["):
            try:
                return _parse_json(p, parse_json(text, p, what="--texts"), names)
            except ReadRefused as e:
                if as_json or "is not valid JSON" not in str(e):
                    raise
    except ReadRefused as e:
        raise GeosteerError(f"{e}; expected {TEXTS_SHAPE}") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise GeosteerError(f"--texts {p} holds no text; expected {TEXTS_SHAPE}")
    return [(None, line) for line in lines]


def score(concepts: list, items: list[tuple[str | None, str]], min_texts: int = 1,
          log=lambda s: None) -> list[dict]:
    """One record per (concept, text): the embedding judge's P(concept | text) and, for a sentiment concept,
    the lexicon's."""
    from geosteer.bench.judges import MIN_JUDGE_TEXTS, EmbeddingJudge, judge_texts, lexicon_of, lexicon_prob

    records = []
    for c in concepts:
        texts = [t for name, t in items if name is None or name == c.name]
        if not texts:
            continue
        pos, neg = judge_texts(c)
        if min(len(pos), len(neg)) < MIN_JUDGE_TEXTS:
            log(f"note: concept {c.name!r}: its judge is trained on {len(pos)} positive and {len(neg)} negative "
                f"texts (the benchmark asks >= {MIN_JUDGE_TEXTS} a side)")
        probs = EmbeddingJudge().fit(pos, neg, min_texts=min_texts).prob(texts)
        polarity = lexicon_of(c)
        lex = lexicon_prob(texts, polarity) if polarity else [None] * len(texts)
        for t, p, q in zip(texts, probs, lex, strict=True):
            records.append({"concept": c.name, "text": t, "embedding_judge": float(p),
                            "lexicon": f"vader-{polarity}" if polarity else None,
                            "lexicon_prob": None if q is None else float(q)})
    return records


def _table(records: list[dict]) -> list[dict]:
    from rich.markup import escape  # a text like "[not json] ..." is shown, not read as rich markup

    with_lex = any(r["lexicon"] for r in records)
    rows = []
    for r in records:
        short = r["text"] if len(r["text"]) <= SHOWN else r["text"][:SHOWN - 1] + "…"
        row = {"concept": r["concept"], "text": escape(short), "embedding judge P": r["embedding_judge"]}
        if with_lex:
            row["VADER P"] = "-" if r["lexicon_prob"] is None else r["lexicon_prob"]
        rows.append(row)
    return rows


def judge_cmd(
    concepts: Path = typer.Option(..., "--concepts", help="concept file (geosteer's JSON list, an AxBench file, "
                                  "or 'bundled'): each concept's judge is trained on its texts"),
    texts: Path = typer.Option(..., "--texts", help="texts to score: " + TEXTS_SHAPE + " (a plain string is "
                               "scored for every concept)"),
    as_json: bool = JSON_OPT,
    min_texts: int = typer.Option(1, "--min-texts", hidden=True, help="refuse a concept with fewer judge texts "
                                  "a side"),
) -> None:
    """Score texts with the steering benchmark's judges.

    The embedding judge's P(concept | text) of each concept and, for sentiment concepts, the VADER lexicon's."""
    try:
        items_of = load_concepts(concepts)  # one line for a bad file, before any model loads
    except GeosteerError as e:  # the line names the option, as every other verb's does
        msg, source = str(e), str(concepts)
        if not msg.startswith("--concepts"):
            msg = f"--concepts {msg}" if msg.startswith(source) else f"--concepts {source}: {msg}"
        raise GeosteerError(msg) from None
    items = read_texts(texts, {c.name for c in items_of})
    records = score(items_of, items, min_texts=min_texts, log=lambda s: typer.echo(s, err=True))
    from geosteer.cli.common import emit

    emit(records if as_json else _table(records), as_json, table_title="judges (P(concept | text))")
