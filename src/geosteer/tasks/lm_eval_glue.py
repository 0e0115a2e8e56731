"""What the generated task folders' ``utils.py`` imports: the jsonl loader and the RULER scorer hook."""

from __future__ import annotations

from pathlib import Path

from geosteer.tasks.ruler import string_match_all, string_match_part


def load_jsonl(path: str | Path):
    """A ``datasets.DatasetDict`` with one ``test`` split read from a local jsonl file (no cache, no
    download)."""
    import datasets

    from geosteer.readers import parse_json, read_text

    text = read_text(path, what="task file")
    rows = [parse_json(line, f"{path} line {i}", what="task file")
            for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def ruler_results(doc: dict, results: list) -> dict:
    """lm-eval ``process_results`` for the RULER-style tasks: ``score`` = RULER's string_match_all
    (string_match_part for QA-style docs that carry ``"metric": "part"``)."""
    pred = results[0] if results else ""
    fn = string_match_part if doc.get("metric") == "part" else string_match_all
    return {"score": fn(pred, list(doc["outputs"]))}
