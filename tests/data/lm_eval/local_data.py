"""Loaders for the geosteer test tasks: the data files sit next to this module (no download, no cache)."""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _rows(name):
    lines = (HERE / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _dataset(name):
    import datasets

    return datasets.DatasetDict({"test": datasets.Dataset.from_list(_rows(name))})


def load_mc(**kwargs):
    return _dataset("mc.jsonl")


def load_ppl(**kwargs):
    return _dataset("ppl.jsonl")


def ppl_results(doc, results):
    (loglikelihood,) = results
    words = len(doc["text"].split())
    n_bytes = len(doc["text"].encode("utf-8"))
    return {"word_perplexity": (loglikelihood, words), "byte_perplexity": (loglikelihood, n_bytes),
            "bits_per_byte": (loglikelihood, n_bytes)}
