"""Can instruction-labelled stock continuations admit a judge for sentiment, register or refusal?

``geosteer bench decide`` trains these concepts' judges on templated sentences and admits a judge only when its
AUC on the stock model's own continuations (16 requests under the concept's instruction vs its opposite) is
>= 0.85. This study swaps the templated judge texts for the stock model's continuations of 50 other requests
(``decide_judge_requests.json``) under four paraphrased instructions a side (none of them the admission
instruction or the prompting lever's) and reads the same admission, beside the VADER lexicon's AUC. If the
model does not follow the instructions, the labels are not true and no judge can pass.

    .venv/bin/python benchmarks/decide_instructed_judges.py --out docs/results/decide/instructed_judges.json

Seed 0 (the judge's), greedy continuations of 32 tokens, one torch thread; ~3 CPU-min per concept.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from geosteer.bench.decide_concepts import by_name
from geosteer.bench.decide_driver import readers
from geosteer.bench.decide_run import _admission_texts, instructed
from geosteer.bench.design import Design
from geosteer.bench.judges import LEXICONS, EmbeddingJudge, admission, auc, lexicon_prob

REQUESTS = Path(__file__).with_name("decide_judge_requests.json")
HAPPY = ("Reply with joy and enthusiasm; everything is wonderful.", "Be upbeat and delighted in your reply.",
         "Respond like someone in a great mood who loves life.", "Write your reply full of happiness and warmth.")
SAD = ("Reply with sorrow; everything feels hopeless.", "Be miserable and downcast in your reply.",
       "Respond like someone in a terrible mood who is unhappy.", "Write your reply full of sadness and regret.")
FORMAL = ("Reply in the style of an official letter.", "Use formal, bureaucratic language in your reply.",
          "Respond as a polite civil servant writing to a citizen.", "Write your reply in a dignified, formal tone.")
CASUAL = ("Reply in slang, very relaxed.", "Use chatty, informal language with contractions.",
          "Respond like a teenager texting a mate.", "Write your reply in a loose, casual tone.")
REFUSE = ("Decline the request and do not answer it.", "Say no: you will not do what is asked.",
          "Respond by refusing, politely, and explain you cannot help.",
          "Do not help; apologise and turn the request down.")
HELP = (None, "Be as helpful as you can.", "Answer the request directly and usefully.",
        "Respond with practical help.")

INSTRUCTIONS = {"positive-sentiment": (HAPPY, SAD), "negative-sentiment": (SAD, HAPPY), "formal": (FORMAL, CASUAL),
                "refusal": (REFUSE, HELP)}


def judge_texts(r, name: str, cache: Path, new_tokens: int) -> tuple[list[str], list[str]]:
    """(positive, negative) instructed continuations of the judge requests, cached in ``cache``."""
    path = cache / f"{name}.json"
    if path.is_file():
        doc = json.loads(path.read_text())
        return doc["positive"], doc["negative"]
    prompts = json.loads(REQUESTS.read_text())
    sides = [[t for i in side for t in instructed(r, prompts, i, new_tokens) if t.strip()]
             for side in INSTRUCTIONS[name]]
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"positive": sides[0], "negative": sides[1]}, indent=1) + "\n")
    return sides[0], sides[1]


def study(r, name: str, scratch: Path, design: Design) -> dict:
    dc = by_name([name])[0]
    pos, neg = _admission_texts(r, dc, scratch, design)
    jp, jn = judge_texts(r, name, scratch / "judge_texts", design.new_tokens)
    row = {"concept": name, "judge_texts": [len(jp), len(jn)], "admission_texts": [len(pos), len(neg)]}
    for source, (p, n) in {"templated": (dc.judge_positive, dc.judge_negative), "instructed": (jp, jn)}.items():
        j = EmbeddingJudge(r.encoder, seed=0).fit(p, n)
        row[f"{source}_auc"] = admission(j.prob(pos), j.prob(neg))["auc"]
    lex = LEXICONS.get(dc.lexicon or "")
    row["lexicon_auc"] = auc(lexicon_prob(pos, lex), lexicon_prob(neg, lex)) if lex else None
    row["examples"] = {"admission_positive": pos[:2], "admission_negative": neg[:2]}
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--scratch", type=Path, default=Path("results/decide-instructed"))
    args = ap.parse_args()
    r, design = readers("smollm2", 1), Design()
    rows = []
    for name in INSTRUCTIONS:
        rows.append(study(r, name, args.scratch, design))
        print({k: v for k, v in rows[-1].items() if k != "examples"}, flush=True)
    doc = {"command": "benchmarks/decide_instructed_judges.py", "admission_threshold": 0.85, "rows": rows}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
