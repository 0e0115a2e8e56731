"""Can sentiment, register and refusal be admitted on the instruct models with stronger prompts and answer judges?

For one model and one prompt style (``geosteer.bench.instruct_concepts.STYLES``: ``chat``, a system prompt with the
style and an example sentence; ``text``, a plain-text continuation prompt without the chat template), greedy
continuations of ``--new-tokens`` (40) tokens for the first ``--n`` requests of the pool (:func:`pool`:
``geosteer.bench.instruct_concepts.requests()``, then the 64 of ``instruct_requests_more.json`` beside this script:
128) under each condition (``--conditions``), in batches of ``--batch``.
Every answer is written to ``<out>/<model>/texts/<style>-<condition>.jsonl``; requests already answered are read
back, so a killed run resumes and a larger ``--n`` adds only the new requests. Each batch's wall time and the load
average are written to ``<out>/<model>/costs.jsonl``.

``--summarise`` reads every (model, style, concept) whose two sides exist and writes ``tries.csv`` /
``tries.json``, a try for each of the first 24, 64 and 128 requests and for all answered (as far as answered): per
judge (the embedding judge trained on the answers and read on held-out requests, the same
with each answer's opening cut and with the refused answers dropped, ``bench decide``'s own templated judge,
VADER for sentiment, the refusal detector for refusal) the AUC against ``ADMISSION_AUC``; refusals and repeated
4-grams per side; n; seed; command; generation seconds. ``--table`` prints it as the table of
docs/instruct-models.md. ``--write-concepts FILE --model M --style S --only C1,C2`` writes those concepts'
answers as a concept file for ``geosteer bench decide --concepts`` (each concept with the instruction its positive
answers were asked with, the prompting lever's instruction) and, beside it (``.admission.json``), what
``bench decide``'s own admission reads on it.

    nice -n 10 .venv/bin/python benchmarks/instruct_concepts.py --model qwen2.5-0.5b --style chat --n 24
    .venv/bin/python benchmarks/instruct_concepts.py --summarise
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from geosteer.bench import instruct_concepts as IC
from geosteer.bench.judges import auc

OUT = Path("docs/results/instruct/concepts")
MORE_REQUESTS = Path(__file__).with_name("instruct_requests_more.json")
TRY_SIZES = (24, 64, 128)  # a try is summarised on each of these request prefixes (and on all answered)
OPENING = 5  # words cut from each answer's start in the check that the judge reads more than a fixed opening


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def append_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


@lru_cache(maxsize=1)
def pool() -> tuple[str, ...]:
    """The requests answers are asked on, in order: the bundled ones, then MORE_REQUESTS; all distinct, none one of
    the concept file's test requests."""
    out = IC.requests() + tuple(json.loads(MORE_REQUESTS.read_text(encoding="utf-8")))
    if len(set(out)) != len(out) or set(out) & set(IC.test_requests()) or IC.EXAMPLE_REQUEST in out:
        raise SystemExit(f"{MORE_REQUESTS}: a request repeats, or is a test or example request")
    return out


def generate(args) -> None:
    import torch

    from geosteer.bench.scoring import continue_prompts
    from geosteer.models.loading import load_model

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model, tok = load_model(args.model, dtype="float32")
    base = args.out / args.model
    append_jsonl(base / "costs.jsonl", [{"event": "load", "seconds": round(time.perf_counter() - t0, 1),
                                         "threads": args.threads, "loadavg": os.getloadavg()[0]}])
    reqs = pool()[:args.n]
    for cond in args.conditions.split(","):
        path = base / "texts" / f"{args.style}-{cond}.jsonl"
        done = {r["request"] for r in read_jsonl(path)}
        todo = [(i, r) for i, r in enumerate(reqs) if r not in done]
        for j in range(0, len(todo), args.batch):
            chunk = todo[j:j + args.batch]
            prompts = [IC.prompt_for(tok, args.style, cond, r) for _, r in chunk]
            t1, load = time.perf_counter(), os.getloadavg()[0]
            out = continue_prompts(model, tok, prompts, args.new_tokens)
            secs = time.perf_counter() - t1
            rows = [{"model": args.model, "style": args.style, "condition": cond, "index": i, "request": r,
                     "prompt": p, "text": t, "n_tokens": len(ids), "refusal": IC.is_refusal(t)}
                    for (i, r), p, t, ids in zip(chunk, prompts, out.texts, out.ids, strict=True)]
            append_jsonl(path, rows)
            tokens = sum(r["n_tokens"] for r in rows)
            append_jsonl(base / "costs.jsonl", [{"event": "batch", "style": args.style, "condition": cond,
                                                 "rows": len(rows), "new_tokens": args.new_tokens,
                                                 "generated_tokens": tokens, "seconds": round(secs, 2),
                                                 "threads": args.threads, "loadavg_before": load,
                                                 "loadavg_after": os.getloadavg()[0]}])
            print(f"{args.model} {args.style}-{cond}: {len(rows)} answers in {secs:.0f} s, "
                  f"{sum(r['refusal'] for r in rows)} refusals", flush=True)


def sides(base: Path, style: str, concept: str) -> tuple[list[dict], list[dict]] | None:
    """The two sides' answers to the requests both sides answered (in request order), or None."""
    pc, nc = IC.CONCEPTS[concept]
    pos = {r["request"]: r for r in read_jsonl(base / "texts" / f"{style}-{pc}.jsonl")}
    neg = {r["request"]: r for r in read_jsonl(base / "texts" / f"{style}-{nc}.jsonl")}
    both = [q for q in pool() if q in pos and q in neg]
    return ([pos[q] for q in both], [neg[q] for q in both]) if both else None


def templated_judge(concept: str):
    from geosteer.bench.decide_templates import SPECS
    from geosteer.bench.judges import EmbeddingJudge

    spec = SPECS[concept]
    return EmbeddingJudge(seed=0).fit(spec["positive"](), spec["negative"](), min_texts=1)


def judge_aucs(concept: str, pt: list[str], nt: list[str], reqs: list[str], templated) -> list[tuple]:
    """(judge, seed, AUC, detail) of every judge that reads this concept's two sides."""
    out = []
    a = IC.answer_judge_auc(pt, nt, reqs, reqs)
    out.append(("answer-trained (held-out requests)", 0, a["auc"],
                f"{a['folds']} folds by request, fold AUCs {a['fold_aucs']}"))
    if templated is not None:
        out.append(("decide's templated judge", 0, auc(templated.prob(pt), templated.prob(nt)),
                    "trained on the concept's templated sentences"))
    polarity = IC.VADER_POLARITY.get(concept)
    if polarity:
        out.append(("VADER", "", IC.vader_auc(pt, nt, polarity), "compound score, no training"))
    if concept == "refusal":
        out.append(("refusal detector", "", IC.refusal_auc(pt, nt), "refusal patterns in the first 100 characters"))
        return out
    cut = [" ".join(t.split()[OPENING:]) for t in pt], [" ".join(t.split()[OPENING:]) for t in nt]
    c = IC.answer_judge_auc(cut[0], cut[1], reqs, reqs)
    out.append((f"answer-trained, first {OPENING} words cut", 0, c["auc"],
                f"the same answers without their opening; fold AUCs {c['fold_aucs']}"))
    kp = [(t, q) for t, q in zip(pt, reqs, strict=True) if not IC.is_refusal(t)]
    kn = [(t, q) for t, q in zip(nt, reqs, strict=True) if not IC.is_refusal(t)]
    if len(kp) + len(kn) == 2 * len(pt) or min(len(kp), len(kn)) < IC.FOLDS:
        return out
    b = IC.answer_judge_auc([t for t, _ in kp], [t for t, _ in kn], [q for _, q in kp], [q for _, q in kn])
    kept = f"{len(kp)}+/{len(kn)}- answers that are not refusals"
    out.append(("answer-trained, refusals dropped", 0, b["auc"], f"{kept}; fold AUCs {b['fold_aucs']}"))
    if polarity:
        out.append(("VADER, refusals dropped", "", IC.vader_auc([t for t, _ in kp], [t for t, _ in kn], polarity),
                    kept))
    return out


def repeated(texts: list[str]) -> float:
    """The mean share of each answer's word 4-grams that occurred earlier in it (a looping answer: near 1)."""
    from geosteer.bench.scoring import repeated_ngram_share

    return round(float(np.mean([repeated_ngram_share(t.lower().split()) for t in texts])), 3)


def try_rows(model: str, base: Path, style: str, concept: str, judges: dict) -> list[dict]:
    """One row per judge of a (model, style, concept) whose two sides were answered, for each request prefix of
    TRY_SIZES shorter than the answered requests and for all of them."""
    got = sides(base, style, concept)
    if got is None:
        return []
    answered = len(got[0])
    return [row for n in sorted({k for k in TRY_SIZES if k < answered} | {answered})
            for row in _try_rows(model, style, concept, got[0][:n], got[1][:n], judges)]


def _try_rows(model: str, style: str, concept: str, pos: list[dict], neg: list[dict], judges: dict) -> list[dict]:
    from geosteer.bench.judges import ADMISSION_AUC

    pt, nt = [r["text"] for r in pos], [r["text"] for r in neg]
    pc, nc = IC.CONCEPTS[concept]
    common = {"model": model, "style": style, "concept": concept, "positive": pc, "negative": nc, "n": len(pos),
              "refusals_positive": sum(IC.is_refusal(t) for t in pt),
              "refusals_negative": sum(IC.is_refusal(t) for t in nt),
              "distinct_positive": len(set(pt)), "distinct_negative": len(set(nt)),
              "repeated_4grams_positive": repeated(pt), "repeated_4grams_negative": repeated(nt),
              "threshold": ADMISSION_AUC}
    return [{**common, "judge": j, "seed": seed, "auc": round(a, 4), "admitted": bool(a >= ADMISSION_AUC),
             "detail": d} for j, seed, a, d in judge_aucs(concept, pt, nt, [r["request"] for r in pos],
                                                          judges.get(concept))]


def costs(base: Path) -> dict:
    """(style, condition) -> generation seconds and rows, summed over batches."""
    out: dict = {}
    for r in read_jsonl(base / "costs.jsonl"):
        if r.get("event") == "batch":
            c = out.setdefault(f"{r['style']}-{r['condition']}", {"seconds": 0.0, "rows": 0, "tokens": 0,
                                                                   "loadavg": []})
            c["seconds"] += r["seconds"]
            c["rows"] += r["rows"]
            c["tokens"] += r["generated_tokens"]
            c["loadavg"].append(r["loadavg_before"])
    for c in out.values():
        c["seconds"] = round(c["seconds"], 1)
        c["loadavg"] = [round(min(c["loadavg"]), 1), round(max(c["loadavg"]), 1)]
    return out


def summarise(out: Path) -> None:
    from geosteer.bench.decide_templates import SPECS

    judges = {c: templated_judge(c) for c in IC.CONCEPTS if c in SPECS}
    rows, cost = [], {}
    for base in sorted(p for p in out.iterdir() if (p / "texts").is_dir()):
        cost[base.name] = costs(base)
        for style in IC.STYLES:
            for concept in IC.CONCEPTS:
                rows += try_rows(base.name, base, style, concept, judges)
    most = {}
    for r in rows:
        key = (r["model"], r["style"], r["concept"])
        most[key] = max(most.get(key, 0), r["n"])
    for r in rows:
        c = cost[r["model"]]
        parts = [c.get(f"{r['style']}-{x}", {}) for x in (r["positive"], r["negative"])]
        # the batches' seconds cover every answered request: given on a try's largest request set only
        full = r["n"] == most[(r["model"], r["style"], r["concept"])]
        r["generation_seconds"] = round(sum(p.get("seconds", 0) for p in parts), 1) if full else ""
        r["command"] = (f"nice -n 10 .venv/bin/python benchmarks/instruct_concepts.py --model {r['model']} "
                        f"--style {r['style']} --n {r['n']} --conditions {r['positive']},{r['negative']} "
                        "--threads 1")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "tries.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    doc = {"command": "benchmarks/instruct_concepts.py --summarise", "generation": "greedy, 40 new tokens, fp32",
           "styles": IC.STYLES, "concepts": IC.CONCEPTS, "refusal_patterns": list(IC.REFUSAL),
           "folds": IC.FOLDS, "costs": cost, "tries": rows}
    (out / "tries.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for r in rows:
        print(f"{r['model']:13} {r['style']:4} {r['concept']:19} {r['judge']:35} n={r['n']:3} auc={r['auc']:.3f} "
              f"{'ADMITTED' if r['admitted'] else '-'} ref={r['refusals_positive']}/{r['refusals_negative']}")


TABLE = (("answer-trained (held-out requests)", "answer-trained"), ("answer-trained, first 5 words cut", "opening cut"),
         ("answer-trained, refusals dropped", "refusals dropped"), ("decide's templated judge", "templated"),
         ("VADER", "VADER"), ("refusal detector", "detector"))


def table(out: Path) -> None:
    """tries.csv as the markdown table of docs/instruct-models.md: one row per (model, concept, style)."""
    rows = list(csv.DictReader(open(out / "tries.csv", encoding="utf-8")))
    keys = list(dict.fromkeys((r["model"], r["concept"], r["style"], r["n"]) for r in rows))
    print("| model | concept | style | n | " + " | ".join(h for _, h in TABLE) +
          " | refusals (+/-) | repeated 4-grams (+/-) | admitted |")
    print("|---" * (len(TABLE) + 7) + "|")
    for k in keys:
        got = {r["judge"]: r for r in rows if (r["model"], r["concept"], r["style"], r["n"]) == k}
        first = next(iter(got.values()))
        aucs = [f"{float(got[j]['auc']):.2f}" if j in got else "–" for j, _ in TABLE]
        ok = got["answer-trained (held-out requests)"]["admitted"] == "True"
        print(f"| {' | '.join(k)} | {' | '.join(aucs)} | {first['refusals_positive']}/"
              f"{first['refusals_negative']} | {float(first['repeated_4grams_positive']):.2f}/"
              f"{float(first['repeated_4grams_negative']):.2f} | {'yes' if ok else 'no'} |")


def admission_instruction(style: str, concept: str) -> str | None:
    """The instruction a concept's positive answers were asked with: the system prompt of its positive condition
    (``chat``, and ``shot`` before its example exchange); ``text`` has none (its template wraps the request)."""
    return IC.CHAT[IC.CONCEPTS[concept][0]] if style in ("chat", "shot") else None


def write_concepts(args) -> None:
    docs = []
    for concept in args.only.split(","):
        got = sides(args.out / args.model, args.style, concept)
        if got is None:
            raise SystemExit(f"{concept}: no answers of {args.model} in style {args.style}")
        docs.append(IC.concept_doc(concept, [r["text"] for r in got[0]], [r["text"] for r in got[1]],
                                   [r["request"] for r in got[0]], [r["request"] for r in got[1]],
                                   admission_instruction(args.style, concept)))
    path = Path(args.write_concepts)
    path.write_text(json.dumps(IC.concept_file(docs), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{path}: " + ", ".join(f"{d['name']} ({len(d['positive'])}+/{len(d['negative'])}-)" for d in docs))
    asked: dict[str, set[str]] = {}
    for concept in args.only.split(","):
        for side in sides(args.out / args.model, args.style, concept) or ():
            for r in side:
                asked.setdefault(r["text"].strip(), set()).add(r["request"])
    checked = decide_admission(path, asked)
    checked.update({"model": args.model, "style": args.style, "command": " ".join(sys.argv)})
    path.with_name(path.name.replace(".concepts.json", ".admission.json")).write_text(
        json.dumps(checked, indent=1) + "\n", encoding="utf-8")


def decide_admission(path: Path, asked: dict[str, set[str]]) -> dict:
    """What ``bench decide`` computes for each concept of the file at seed 0: its embedding judge trained on the
    file's judge texts, read on the file's held-out admission texts; and the same with the judge texts that
    answer a held-out text's request (``asked``: text -> its requests) left out of the training (the file holds
    each answer's request as its group, and decide holds out whole groups: the two agree)."""
    from geosteer.bench.decide_concepts import file_concepts
    from geosteer.bench.judges import EmbeddingJudge, admission

    out = {"file": str(path), "seed": 0, "concepts": {}}
    for dc in file_concepts(str(path)):
        judge = EmbeddingJudge(seed=0).fit(dc.judge_positive, dc.judge_negative, min_texts=1)
        a = admission(judge.prob(dc.admission["positive"]), judge.prob(dc.admission["negative"]))
        a.update(judge_texts=[len(dc.judge_positive), len(dc.judge_negative)])
        held = set().union(*[asked.get(t, set()) for t in dc.admission["positive"] + dc.admission["negative"]])
        jp = [t for t in dc.judge_positive if not asked.get(t, set()) & held]
        jn = [t for t in dc.judge_negative if not asked.get(t, set()) & held]
        other = EmbeddingJudge(seed=0).fit(jp, jn, min_texts=1)
        a["without_held_out_requests"] = {"auc": auc(other.prob(dc.admission["positive"]),
                                                     other.prob(dc.admission["negative"])),
                                          "judge_texts": [len(jp), len(jn)]}
        out["concepts"][dc.name] = a
        print(f"{dc.name}: bench decide's admission AUC {a['auc']:.3f} on {a['n_positive']}+/{a['n_negative']}- "
              f"held-out answers ({'admitted' if a['admitted'] else 'not admitted'}); without the held-out "
              f"requests' answers in training {a['without_held_out_requests']['auc']:.3f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--style", default="chat", choices=list(IC.STYLES))
    ap.add_argument("--conditions", default="cheerful,gloomy,formal,casual,refuse,none")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--new-tokens", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--summarise", action="store_true")
    ap.add_argument("--table", action="store_true", help="print tries.csv as a markdown table")
    ap.add_argument("--write-concepts", default=None)
    ap.add_argument("--only", default=",".join(IC.CONCEPTS))
    args = ap.parse_args()
    if not 0 < args.n <= len(pool()):
        ap.error(f"--n {args.n}: the pool has {len(pool())} requests")
    if args.summarise:
        summarise(args.out)
    elif args.table:
        table(args.out)
    elif args.write_concepts:
        write_concepts(args)
    else:
        generate(args)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
