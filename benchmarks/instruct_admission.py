"""What the ladder's instruct models do under the steering benchmark's instructions, and whose judge admits.

For one model (``qwen2.5-0.5b`` or ``qwen2.5-1.5b``, Qwen2.5-Coder-Instruct) and 24 of the benchmark's neutral
requests (``geosteer.bench.decide_concepts.neutral_requests``, requests 17-40: ``bench decide``'s 16 admission
requests and the 8 after them), greedy continuations of ``--new-tokens`` (40) tokens, all 24 in one batch, in
up to three prompt forms (``--forms``, default ``chat,qa``):

- ``chat``: the tokenizer's chat template, the instruction as the system prompt (no instruction: the template's
  own default system prompt), as ``bench decide`` formats every prompt;
- ``plain``: no template, ``"<instruction>\\n\\n<request>"`` (``bench decide``'s formatting without chat);
- ``qa``: no template, ``"<instruction>\\n\\nQuestion: <request>\\nAnswer:"`` (the same, the request wrapped).

Six conditions each: no instruction, and the five distinct instructions of ``bench decide``'s sentiment, register
and refusal concepts (``geosteer.bench.decide_templates.SPECS``). Every text is written to
``<out>/<model>/texts/<form>-<condition>.jsonl`` with its refusal and persona flags (:data:`REFUSAL` and
:data:`PERSONA`, matched in the first :data:`HEAD_CHARS` characters); a (form, condition) already written is
read back, so a killed run resumes.

Admission is ``bench decide``'s: the concept's embedding judge (``EmbeddingJudge``, seed 0, trained on the
concept's templated judge texts) read on the model's own texts under the concept's instruction against its
opposite (refusal: against no instruction), admitted at AUC >= ``ADMISSION_AUC``, beside the VADER lexicon's
AUC for sentiment. ``decide`` reads the 16 admission requests (requests 17-32) at 32 tokens: the same texts here
are the first 32 tokens of each 40-token greedy continuation (``admission_32``); ``all_24`` reads all 24 requests
at 40 tokens.

    nice -n 10 .venv/bin/python benchmarks/instruct_admission.py --model qwen2.5-0.5b --out docs/results/instruct
    .venv/bin/python benchmarks/instruct_admission.py --summarise --out docs/results/instruct

``--sizing --batch 8`` times one batch of 8 (chat, no instruction) and writes nothing.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import resource
import time
from pathlib import Path

import numpy as np

FORMS = ("chat", "plain", "qa")
BATCH = 24  # one batch per (form, condition): decode reads the weights once per step for all rows
FIRST, LAST = 16, 40  # the requests used: decide's 16 admission requests (17-32) and the 8 after them
HEAD_CHARS = 100  # refusal and persona patterns are matched in the text's first characters
ADMISSION_TOKENS = 32  # bench decide's Design.new_tokens
# Refusal: the model declines or says it cannot do what is asked (case-insensitive regular expressions).
REFUSAL = (r"\bI'?m sorry\b", r"\bI am sorry\b", r"\bI apologi[sz]e\b", r"\bsorry, (but )?I\b",
           r"\bI (can't|cannot|can not|won't|will not) (assist|help|provide|do|comply|fulfil|fulfill|answer)",
           r"\bI'?m (unable|not able) to\b", r"\bI am (unable|not able) to\b", r"\bI must (decline|refuse)\b",
           r"\bI'?m afraid I\b", r"\bunfortunately,? I\b")
# Persona: the model talks about being an AI instead of answering as asked.
PERSONA = (r"\bas an AI\b", r"\bas a (large )?language model\b", r"\bI'?m an AI\b", r"\bI am an AI\b",
           r"\bI (don't|do not) have (personal|feelings|emotions|preferences|a physical)\b",
           r"\bas an artificial intelligence\b")
AS_AN_AI = r"\bas an AI\b"
CONCEPTS = ("positive-sentiment", "negative-sentiment", "formal", "refusal")


def conditions() -> dict[str, str | None]:
    """condition name -> instruction (None: no instruction), the instructions of bench decide's concepts."""
    from geosteer.bench.decide_templates import SPECS

    return {"none": None, "cheerful": SPECS["positive-sentiment"]["instruction"],
            "gloomy": SPECS["negative-sentiment"]["instruction"], "formal": SPECS["formal"]["instruction"],
            "casual": SPECS["formal"]["opposite"], "refuse": SPECS["refusal"]["instruction"]}


def concept_sides() -> dict[str, tuple[str, str]]:
    """concept -> (condition of its labelled-positive texts, of its labelled-negative texts), read off the
    concepts' admission instructions so they are bench decide's own."""
    from geosteer.bench.decide_concepts import by_name

    by_instruction = {v: k for k, v in conditions().items()}
    return {dc.name: (by_instruction[dc.admission["positive"]], by_instruction[dc.admission["negative"]])
            for dc in by_name(list(CONCEPTS))}


def flags(text: str) -> dict:
    head = text[:HEAD_CHARS]
    hit = [p for p in REFUSAL if re.search(p, head, re.IGNORECASE)]
    persona = [p for p in PERSONA if re.search(p, head, re.IGNORECASE)]
    return {"refusal": bool(hit), "persona": bool(persona),
            "as_an_ai": bool(re.search(AS_AN_AI, head, re.IGNORECASE)), "patterns": hit + persona}


def formatted(tok, form: str, request: str, instruction: str | None) -> str:
    from geosteer.bench.prompts import format_prompt

    if form == "chat":
        return format_prompt(tok, request, True, instruction)
    if form == "plain":
        return format_prompt(tok, request, False, instruction)
    return format_prompt(tok, f"Question: {request}\nAnswer:", False, instruction)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def generate(model, tok, prompts: list[str], new_tokens: int, batch: int) -> tuple[list[dict], list[float]]:
    """Greedy continuations in batches of ``batch`` (bench decide's generator); the rows and each batch's
    seconds."""
    from geosteer.bench.scoring import continue_prompts

    rows, seconds = [], []
    for i in range(0, len(prompts), batch):
        t0 = time.perf_counter()
        out = continue_prompts(model, tok, prompts[i:i + batch], new_tokens)
        seconds.append(time.perf_counter() - t0)
        for text, ids in zip(out.texts, out.ids, strict=True):
            short = tok.decode(ids[:ADMISSION_TOKENS], skip_special_tokens=True).strip()
            rows.append({"text": text, "text_32": short, "n_tokens": len(ids)})
    return rows, seconds


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def run_model(args) -> None:
    import torch

    from geosteer.bench.decide_concepts import neutral_requests
    from geosteer.models.loading import load_model

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model, tok = load_model(args.model, dtype=args.dtype)
    load_s = time.perf_counter() - t0
    requests = list(neutral_requests())[FIRST:LAST]
    if args.sizing:
        prompts = [formatted(tok, "chat", r, None) for r in requests[:args.batch]]
        rows, secs = generate(model, tok, prompts, args.new_tokens, args.batch)
        print(json.dumps({"model": args.model, "dtype": args.dtype, "threads": args.threads, "load_s": round(load_s, 1),
                          "batch": args.batch, "batch_s": round(secs[0], 1), "peak_rss_mb": round(peak_rss_mb()),
                          "texts": [r["text"] for r in rows]}, indent=1))
        return
    base = args.out / args.model
    cost_path = base / "costs.json"
    costs = json.loads(cost_path.read_text()) if cost_path.is_file() else {"runs": []}
    run = {"dtype": args.dtype, "threads": args.threads, "new_tokens": args.new_tokens, "batch": args.batch,
           "load_s": round(load_s, 1), "units": {}}
    costs["runs"].append(run)
    forms = args.forms.split(",")
    wanted = args.conditions.split(",") if args.conditions else list(conditions())
    for form in forms:
        for cond in wanted:
            instruction = conditions()[cond]
            path = base / "texts" / f"{form}-{cond}.jsonl"
            if path.is_file():
                continue
            prompts = [formatted(tok, form, r, instruction) for r in requests]
            rows, secs = generate(model, tok, prompts, args.new_tokens, args.batch)
            lines = [json.dumps({"model": args.model, "dtype": args.dtype, "form": form, "condition": cond,
                                 "instruction": instruction, "index": FIRST + i, "request": req, "prompt": p, **row,
                                 **flags(row["text"])}, ensure_ascii=False)
                     for i, (req, p, row) in enumerate(zip(requests, prompts, rows, strict=True))]
            write_atomic(path, "\n".join(lines) + "\n")
            run["units"][f"{form}-{cond}"] = {"batch_seconds": [round(s, 2) for s in secs],
                                              "peak_rss_mb": round(peak_rss_mb())}
            run["peak_rss_mb"] = round(peak_rss_mb())
            write_atomic(cost_path, json.dumps(costs, indent=1) + "\n")
            n_ref = sum(json.loads(x)["refusal"] for x in lines)
            print(f"{args.model} {form}-{cond}: {sum(secs):.0f} s for {len(rows)} texts, {n_ref} refusals, "
                  f"peak RSS {peak_rss_mb():.0f} MB", flush=True)


def judges() -> list[tuple[object, object]]:
    """(concept, its embedding judge): bench decide's concepts and judges (seed 0)."""
    from geosteer.bench.decide_concepts import by_name
    from geosteer.bench.judges import EmbeddingJudge

    return [(dc, EmbeddingJudge(seed=0).fit(dc.judge_positive, dc.judge_negative)) for dc in by_name(list(CONCEPTS))]


def admission_rows(model: str, base: Path, trained: list[tuple[object, object]]) -> list[dict]:
    """Per (concept, form): bench decide's admission on the model's texts (module docstring)."""
    from geosteer.bench.decide_concepts import admission_requests, neutral_requests
    from geosteer.bench.judges import LEXICONS, admission, auc, lexicon_prob

    adm_idx = [list(neutral_requests()).index(r) - FIRST for r in admission_requests()]
    sides = concept_sides()
    out = []
    for dc, judge in trained:
        polarity = LEXICONS.get(dc.lexicon or "")
        for form in FORMS:
            paths = [base / "texts" / f"{form}-{c}.jsonl" for c in sides[dc.name]]
            if not all(p.is_file() for p in paths):
                continue
            pos_rows, neg_rows = (read_jsonl(p) for p in paths)
            row = {"model": model, "concept": dc.name, "form": form, "positive": sides[dc.name][0],
                   "negative": sides[dc.name][1]}
            for view, idx, key in (("admission_32", adm_idx, "text_32"), ("all_24", range(len(pos_rows)), "text")):
                pos = [pos_rows[i][key] for i in idx]
                neg = [neg_rows[i][key] for i in idx]
                a = admission(judge.prob(pos), judge.prob(neg))
                row[f"{view}_auc"] = round(a["auc"], 4)
                row[f"{view}_admitted"] = a["admitted"]
                row[f"{view}_n"] = len(pos)
                row[f"{view}_vader_auc"] = (round(auc(lexicon_prob(pos, polarity), lexicon_prob(neg, polarity)), 4)
                                            if polarity else None)
            out.append(row)
    return out


def rate_rows(model: str, base: Path) -> list[dict]:
    """Per (form, condition): refusal, persona and "As an AI" counts and rates, empty texts, mean VADER compound."""
    from geosteer.bench.judges import lexicon_prob

    out = []
    for form in FORMS:
        for cond, instruction in conditions().items():
            path = base / "texts" / f"{form}-{cond}.jsonl"
            if not path.is_file():
                continue
            rows = read_jsonl(path)
            n = len(rows)
            vader = round(float(np.mean(lexicon_prob([r["text"] for r in rows], "positive")) * 2 - 1), 3)
            row = {"model": model, "form": form, "condition": cond, "instruction": instruction or "", "n": n}
            for key in ("refusal", "persona", "as_an_ai"):
                k = sum(r[key] for r in rows)
                row[key] = k
                row[f"{key}_rate"] = round(k / n, 3)
            row["empty"] = sum(not r["text"].strip() for r in rows)
            row["mean_vader_compound"] = vader
            out.append(row)
    return out


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".tmp"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    path.with_name(path.name + ".tmp").replace(path)


def summarise(out: Path) -> None:
    rates, adms = [], []
    trained = judges()
    for base in sorted(p for p in out.iterdir() if (p / "texts").is_dir()):
        rates += rate_rows(base.name, base)
        adms += admission_rows(base.name, base, trained)
    write_csv(out / "rates.csv", rates)
    write_csv(out / "admission.csv", adms)
    doc = {"command": "benchmarks/instruct_admission.py --summarise --out " + str(out),
           "refusal_patterns": list(REFUSAL), "persona_patterns": list(PERSONA), "as_an_ai_pattern": AS_AN_AI,
           "head_chars": HEAD_CHARS, "conditions": conditions(), "concept_sides": concept_sides(),
           "judge_seed": 0, "rates": rates, "admission": adms}
    write_atomic(out / "summary.json", json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    for r in adms:
        print(r, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--out", type=Path, default=Path("docs/results/instruct"))
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=40)
    ap.add_argument("--forms", default="chat,qa")
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--conditions", default=None, help="comma-separated, in the order to run (default: all)")
    ap.add_argument("--sizing", action="store_true")
    ap.add_argument("--summarise", action="store_true")
    args = ap.parse_args()
    if args.summarise:
        summarise(args.out)
    else:
        run_model(args)


if __name__ == "__main__":
    main()
