"""Write the local lm-eval tasks (data + YAML) into a folder: ``python -m geosteer.tasks.build``.

    python -m geosteer.tasks.build --out tasks/ --model smollm2 --lengths 1024,2048 --ruler-n 20

One ``<name>.jsonl`` and ``<name>.yaml`` per task, ``utils.py`` and ``manifest.json`` (arguments, counts,
sha256 per file); lengths are counted with ``--model``'s tokenizer and refused past its positions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from geosteer.artifacts import check_output_folder, write_folder_atomic
from geosteer.errors import GeosteerError
from geosteer.models.loading import BUNDLED, cached_folder, gpt2_tokenizer, smollm2_tokenizer
from geosteer.tasks import proxies, ruler

KIND = "geosteer-tasks"  # the format in manifest.json: what an output folder may be replaced by
UTILS = '''"""Written by geosteer.tasks.build: loaders and the RULER scorer for the tasks in this folder."""
from pathlib import Path

from geosteer.tasks.lm_eval_glue import load_jsonl, ruler_results

HERE = Path(__file__).resolve().parent


def load(file, **kwargs):
    return load_jsonl(HERE / file)


process_ruler = ruler_results
'''


def tokenizer_and_limit(name: str):
    """``(tokenizer, max_position_embeddings)`` of a geosteer model name, folder or Hub id."""

    if name.startswith("tiny-"):
        from geosteer.models.tiny import TINY_FAMILIES, tiny_config

        fam = name[5:]
        if fam not in TINY_FAMILIES:
            raise GeosteerError(f"unknown tiny model '{name}'; valid: {', '.join('tiny-' + f for f in TINY_FAMILIES)}")
        tok = gpt2_tokenizer() if fam == "gpt2" else smollm2_tokenizer()
        cfg = tiny_config(fam, len(tok))
    else:
        from transformers import AutoConfig, AutoTokenizer

        src = str(cached_folder(name)) if name in BUNDLED else name
        try:
            tok = AutoTokenizer.from_pretrained(src)
            cfg = AutoConfig.from_pretrained(src)
        except OSError as e:
            raise GeosteerError(f"cannot load the tokenizer/config of '{name}': {str(e).splitlines()[0]}") from None
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    return tok, int(limit)


def _ruler_yaml(name: str, task: str, length: int) -> str:
    return (f"task: {name}\ntag:\n  - geosteer_ruler_{length}\n  - geosteer_ruler\n"
            f"custom_dataset: !function utils.load\ndataset_kwargs:\n  file: {name}.jsonl\n"
            "output_type: generate_until\ntest_split: test\ndoc_to_text: input\n"
            "doc_to_target: \"{{outputs | join(', ')}}\"\n"
            "generation_kwargs:\n  until: [\"\\n\\n\"]\n"
            f"  max_gen_toks: {ruler.max_new_tokens(task)}\n  do_sample: false\n"
            "process_results: !function utils.process_ruler\n"
            "metric_list:\n  - metric: score\n    aggregation: mean\n    higher_is_better: true\n"
            "metadata:\n  version: 1.0\n")


def _proxy_yaml(name: str, tag: str = "geosteer_proxy") -> str:
    return (f"task: {name}\ntag:\n  - {tag}\n"
            f"custom_dataset: !function utils.load\ndataset_kwargs:\n  file: {name}.jsonl\n"
            "output_type: multiple_choice\ntest_split: test\ndoc_to_text: context\n"
            "doc_to_choice: choices\ndoc_to_target: answer\ntarget_delimiter: \" \"\n"
            "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
            "  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\n"
            "metadata:\n  version: 1.0\n")


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows).encode("utf-8")


MAX_EXAMPLES = 10_000  # --ruler-n / --proxy-n: examples per task (and length); RULER itself uses 500
MAX_LENGTHS = 16  # context lengths in one build


def check_counts(ruler_n: int, proxy_n: int, lengths: Sequence[int]) -> None:
    """Refuse, in one line and before any work, counts a build could not finish: examples per task outside
    1..:data:`MAX_EXAMPLES`, no lengths, more than :data:`MAX_LENGTHS`, or a length given twice."""
    for flag, n in (("--ruler-n", ruler_n), ("--proxy-n", proxy_n)):
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_EXAMPLES:
            raise GeosteerError(f"{flag} must be >= 1 and at most {MAX_EXAMPLES} (got {n!r})")
    if not lengths:
        raise GeosteerError("--lengths is empty; give e.g. 1024,2048")
    if len(lengths) > MAX_LENGTHS:
        raise GeosteerError(f"--lengths names {len(lengths)} lengths; at most {MAX_LENGTHS} per build")
    if len(set(lengths)) != len(lengths):
        raise GeosteerError(f"--lengths names a length twice ({', '.join(map(str, lengths))})")


def build(out: str | Path, *, model: str = "smollm2", lengths: Sequence[int] = (1024, 2048),
          ruler_tasks: Sequence[str] | None = None, ruler_n: int = 20, proxy_tasks: Sequence[str] | None = None,
          proxy_n: int = 200, seed: int = 0) -> dict:
    """Generate the tasks into ``out`` (written atomically) and return the manifest."""

    check_output_folder(out, KIND)  # before any work: a folder of the user's files is never replaced
    check_counts(ruler_n, proxy_n, list(lengths))
    ruler_tasks = list(ruler.TASKS if ruler_tasks is None else ruler_tasks)
    proxy_tasks = list(proxies.PROXIES if proxy_tasks is None else proxy_tasks)
    for t in ruler_tasks:
        if t not in ruler.TASKS:
            ruler.generate(t, 0, 0, seed, len)  # raises the one-line error
    for t in proxy_tasks:
        if t not in proxies.PROXIES:
            proxies.generate(t, 0, seed)
    tok, limit = tokenizer_and_limit(model)
    for L in lengths:
        if L > limit:
            raise GeosteerError(f"context length {L} is above {model}'s limit (max_position_embeddings={limit})")
        if L < 256:
            raise GeosteerError(f"context length {L} is too short (at least 256 tokens)")

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False).input_ids)

    files: dict[str, bytes] = {}
    tasks: dict[str, int] = {}
    for L in lengths:
        for t in ruler_tasks:
            name = f"geosteer_ruler_{t}_{L}"
            rows = ruler.generate(t, L, ruler_n, seed, count)
            files[f"{name}.jsonl"], files[f"{name}.yaml"] = _jsonl(rows), _ruler_yaml(name, t, L).encode()
            tasks[name] = len(rows)
    for t in proxy_tasks:
        name = f"geosteer_{t}"
        rows = proxies.generate(t, proxy_n, seed)
        files[f"{name}.jsonl"] = _jsonl(rows)
        files[f"{name}.yaml"] = _proxy_yaml(name, proxies.TAGS[t]).encode()
        tasks[name] = len(rows)
    manifest = {"format": KIND, "version": 1, "model": model, "max_position_embeddings": limit,
                "lengths": list(lengths), "seed": seed, "ruler_n": ruler_n, "proxy_n": proxy_n, "tasks": tasks,
                "sha256": {k: hashlib.sha256(v).hexdigest() for k, v in sorted(files.items()) if k.endswith(".jsonl")},
                "note": "RULER-style and proxy tasks generated from the bundled corpus (held-out split); "
                        "proxies are not the standard benchmarks"}

    def fill(tmp: Path) -> None:
        for k, v in files.items():
            (tmp / k).write_bytes(v)
        (tmp / "utils.py").write_text(UTILS)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    write_folder_atomic(out, fill, kind=KIND)
    return manifest


def _ints(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise GeosteerError(f"--lengths takes integers separated by commas (got {s!r})") from None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m geosteer.tasks.build", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder to write (replaced atomically)")
    p.add_argument("--model", default="smollm2", help="model whose tokenizer counts the lengths")
    p.add_argument("--lengths", default="1024,2048", help="context lengths in tokens, comma-separated")
    p.add_argument("--ruler-tasks", default="all", help=f"comma-separated subset of {','.join(ruler.TASKS)}, "
                   "'all' or 'none'")
    p.add_argument("--ruler-n", type=int, default=20, help="examples per RULER task and length")
    p.add_argument("--proxy-tasks", default="all", help="comma-separated subset of "
                   f"{','.join(proxies.PROXIES)}, 'all' or 'none'")
    p.add_argument("--proxy-n", type=int, default=200, help="items per proxy task")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)

    def sel(s: str):
        return None if s == "all" else ([] if s == "none" else [x.strip() for x in s.split(",") if x.strip()])

    try:
        m = build(a.out, model=a.model, lengths=_ints(a.lengths), ruler_tasks=sel(a.ruler_tasks),
                  ruler_n=a.ruler_n, proxy_tasks=sel(a.proxy_tasks), proxy_n=a.proxy_n, seed=a.seed)
    except (GeosteerError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(m['tasks'])} tasks to {a.out}: " + ", ".join(f"{k} ({v})" for k, v in m["tasks"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
