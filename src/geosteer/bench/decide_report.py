"""The decisive benchmark's results: tidy per-prompt records, the comparisons, the verdict per lever pair.

Only concepts whose judge was admitted (AUC >= :data:`geosteer.bench.judges.ADMISSION_AUC` on the stock model's
own labelled continuations) enter the comparisons. Each lever is compared with the stock model, with prompting
and with LoRA (:func:`pairs`) at the rule's KL levels (the design's ``decision_levels``) on the rule's endpoints
(:mod:`geosteer.bench.endpoints`): the concept gain, the fluency and relevance costs, concept-level t intervals,
Holm over the claims made, "at every level" as an intersection-union test. At every level of the design the
frontier (:mod:`geosteer.bench.decide_frontier`) gives each lever's concept gain over stock, and the training
summary (:mod:`geosteer.bench.decide_training`) how each learned lever was trained. Stock and prompting have one
setting each, so their records stand at every KL level (prompting at its own control KL, which is reported).
The earlier reading of AxBench's score alone (a
hierarchical bootstrap, :func:`verdicts`) is kept in ``results.json`` as ``earlier_rule``, for comparison; AxBench's
own protocol (each lever's strength chosen on half of the test prompts, :mod:`geosteer.bench.axbench_view`) is
``axbench_view`` there and in ``axbench_view.csv``. What a seed of the run redraws and keeps, as the run folder's
``decide_state.json`` records it, is ``draws`` in ``results.json`` and the last line of ``verdict.txt``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np

from geosteer.bench import axbench_view as A
from geosteer.bench import decide_training as T
from geosteer.bench import endpoints as E
from geosteer.bench.decide_draw import summary_line
from geosteer.bench.decide_frontier import FIGURE, frontier, frontier_markdown
from geosteer.bench.design import ALPHA, EQUIVALENCE_MARGIN, EXPLORATORY, EXPLORATORY_REFERENCES, Design
from geosteer.bench.endpoints_report import detail_markdown, rule_markdown, rule_summary, summary_markdown
from geosteer.bench.kl_match import level_key
from geosteer.bench.stats import compare_pairs, decide, paired_differences
from geosteer.errors import GeosteerError
from geosteer.io_utils import atomic_write_text
from geosteer.readers import read_csv_rows

LEVERS = ("surfaces-rank1", "walls", "lora", "loreft", "vector", "caa", "prompting")
REFERENCES = ("stock", "prompting", "lora")
ITEM_FIELDS = ("score", "concept", "relevance", "fluency", "lexicon_concept", "judge_p", "reader_logprob",
               "repeated", "similarity")
N_BOOT = 20000
RENAME = {"concept": "concept_score"}  # a record's "concept" is the concept's name


def pairs() -> list[tuple[str, str]]:
    """(lever, reference) for every lever and each reference it is not (a pair of references once)."""
    out = []
    for ref in REFERENCES:
        for lever in LEVERS:
            if lever != ref and (ref, lever) not in out and not (lever in REFERENCES and
                                                                 REFERENCES.index(lever) < REFERENCES.index(ref)):
                out.append((lever, ref))
    return out


def n_comparisons() -> int:
    """The verdict's Holm family: one claim per (pair, tested endpoint); KL levels do not multiply it."""
    return E.n_claims(len(pairs()))


def _unit_files(out: Path):
    """(its folder, context, {lever: doc}) of every measured (concept, seed) under ``out``."""
    for ctx_path in sorted((out / "units").glob("*/s*/context.json")):
        ctx = json.loads(ctx_path.read_text(encoding="utf-8"))
        levers = {}
        for p in sorted(ctx_path.parent.glob("*.json")):
            if p.name != "context.json":
                doc = json.loads(p.read_text(encoding="utf-8"))
                levers[doc.get("lever", p.stem) if isinstance(doc, dict) else p.stem] = doc
        yield ctx_path.parent, ctx, levers


def _units(out: Path):
    """(context, {lever: doc}) of every measured (concept, seed) under ``out``."""
    for _folder, ctx, levers in _unit_files(out):
        yield ctx, levers


def _rows(ctx: dict, lever: str, level: str, items: dict, extra: dict) -> list[dict]:
    base = {"concept": ctx["concept"], "kind": ctx["kind"], "direction": ctx["direction"], "seed": ctx["seed"],
            "lever": lever, "kl_level": level, **extra}
    rows = []
    for i, prompt in enumerate(ctx["prompts"]):
        row = {**base, "prompt": prompt, "text": items["texts"][i]}
        for k in ITEM_FIELDS:
            if k in items:
                row[RENAME.get(k, k)] = items[k][i]
        rows.append(row)
    return rows


def keyword_concept(probe: dict, adm: dict) -> dict:
    """The keyword probe judged on the concept score alone: the judge's P(concept) of the bare word list beside
    its mean P on the stock continuations and, where the admission recorded them (``positive_scores``), its
    median P on genuine on-topic texts; the probe passes when the list scores below that on-topic text."""
    on_topic = adm.get("positive_scores")
    median = float(np.median(on_topic)) if on_topic else None
    p = probe.get("judge_p")
    return {"keyword_judge_p": p, "stock_judge_p": probe.get("stock_judge_p"), "on_topic_judge_p": median,
            "keyword_below_on_topic": None if p is None or median is None else bool(p < median)}


def records(out: Path, levels: list[str]) -> tuple[list[dict], list[dict], list[dict]]:
    """(per-prompt records, per-concept records, per-lever-unit records) of everything under ``out``."""
    recs, concepts, units = [], [], []
    for folder, ctx, levers in _unit_files(out):
        try:
            _unit_records(ctx, levers, levels, recs, concepts, units)
        except (KeyError, TypeError, IndexError, ValueError, AttributeError) as e:
            raise GeosteerError(f"run files {folder}: a file lacks what this version of bench decide records "
                                f"({type(e).__name__}: {e}); delete the folder to measure it again") from None
    return recs, concepts, units


def _unit_records(ctx: dict, levers: dict, levels: list[str], recs: list, concepts: list, units: list) -> None:
    """One measured (concept, seed)'s records appended to :func:`records`' lists."""
    adm, probe = ctx["admission"], ctx["keyword_probe"]
    concepts.append({"concept": ctx["concept"], "kind": ctx["kind"], "seed": ctx["seed"],
                     "auc": adm["auc"], "admitted": adm["admitted"], "lexicon_auc": adm.get("lexicon_auc"),
                     "keyword_words": " ".join(probe["words"]), "keyword_score": probe["score"],
                     "stock_score": probe["stock_score"], "keyword_below_stock": probe["below_stock"],
                     **keyword_concept(probe, adm),
                     "levers_done": len(levers), "context_cpu_seconds": ctx["cpu_seconds"]})
    for level in levels:
        recs += _rows(ctx, "stock", level, ctx["stock"], {"strength": 0.0, "kl": 0.0, "reached": True,
                                                           "admitted": adm["admitted"]})
    for name, doc in levers.items():
        units.append({"concept": ctx["concept"], "seed": ctx["seed"], "lever": name, "lr": doc["lr"],
                      "params": doc["params"], "cpu_seconds": doc["cpu_seconds"],
                      "train_cpu_seconds": doc["train_cpu_seconds"],
                      **{f"kl_{k}": v["kl"] for k, v in doc["levels"].items()},
                      **{f"strength_{k}": v["strength"] for k, v in doc["levels"].items()},
                      **T.unit_row(ctx, name, doc)})
        for level, v in doc["levels"].items():
            recs += _rows(ctx, name, level, v["items"], {"strength": v["strength"], "kl": v["kl"],
                                                         "reached": v["reached"], "admitted": adm["admitted"],
                                                         "strength_in_range": v.get("strength_in_range")})


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(xs)) if xs else None


def lever_table(recs: list[dict], levels: list[str], levers: list[str] | None = None) -> list[dict]:
    """Per lever and KL level: mean score, concept, relevance, fluency, control KL over the admitted items."""
    out = []
    for lever in levers or ("stock", *LEVERS):
        for level in levels:
            rows = [r for r in recs if r["lever"] == lever and r["kl_level"] == level and r["admitted"]]
            if rows:
                out.append({"lever": lever, "kl_level": level, "n_items": len(rows),
                            "n_concepts": len({(r["concept"]) for r in rows}),
                            **{k: _mean(r.get(k) for r in rows) for k in ("score", "concept_score", "relevance",
                                                                           "fluency", "reader_logprob", "kl")}})
    return out


def by_kind(recs: list[dict], a: str, b: str, level: str) -> dict[str, float]:
    """Mean paired difference a - b per concept kind (descriptive; not part of the decision)."""
    kinds = {r["concept"]: r["kind"] for r in recs}
    diffs = paired_differences([r for r in recs if r["admitted"]], a, b, level)
    out: dict[str, list[float]] = {}
    for c, d in diffs.items():
        out.setdefault(kinds[c], []).append(float(d.mean()))
    return {k: float(np.mean(v)) for k, v in sorted(out.items())}


def verdicts(recs: list[dict], levels: list[str], margin: float, alpha: float,
             family: list[tuple[str, str]] | None = None, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """The earlier rule (AxBench's score alone): (comparisons, verdicts) of every (pair, level) by the
    hierarchical bootstrap, Holm over the (pair, level) family (default: :func:`pairs`), its decision per pair;
    ``seed``: the bootstrap's. Kept for comparison with :func:`endpoint_verdict`, the rule in force."""
    family = pairs() if family is None else family
    admitted = [r for r in recs if r["admitted"]]
    comps = compare_pairs(admitted, family, levels, n_boot=N_BOOT, seed=seed, alpha=alpha)
    out = []
    for a, b in family:
        rows = [c for c in comps if c["a"] == a and c["b"] == b]
        out.append({"lever": a, "versus": b, "decision": decide(rows, margin),
                    **{f"mean_{r['kl_level']}": r["mean"] for r in rows},
                    **{f"ci_{r['kl_level']}": [r["lo"], r["hi"]] for r in rows},
                    "n_concepts": max(r["n_concepts"] for r in rows)})
    return comps, out


def endpoint_verdict(recs: list[dict], levels: list[str], design, family: list[tuple[str, str]] | None = None,
                     levers: tuple[str, ...] = LEVERS, references: tuple[str, ...] = REFERENCES) -> dict:
    """The rule in force (:mod:`geosteer.bench.endpoints`) over ``family`` (default :func:`pairs`) on the
    admitted records: every interval (``endpoints``), the word per pair (``verdicts``), the rule's constants and
    MDEs (``rule``), and the tables (``summary``: one row per lever; ``markdown``: the rule line, the summary and
    every tested comparison). A design whose unit is the test prompt (``design.unit``) is read per concept
    (:func:`geosteer.bench.endpoints_prompt.verdict`: the same keys, each row and word with its concept)."""
    family = pairs() if family is None else family
    admitted = [r for r in recs if r["admitted"]]
    if getattr(design, "unit", "concept") == "prompt":
        from geosteer.bench.endpoints_prompt import verdict

        return verdict(admitted, levels, design, family, levers, references, ALPHA)
    rows = E.compare(admitted, family, levels, ALPHA)
    verdict_rows = E.verdicts(rows, family)
    rule = rule_summary(rows, len(family), design, ALPHA)
    summary = summary_markdown(verdict_rows, levels, levers, references)
    md = rule_markdown(rule) + "\n" + summary + "\n" + detail_markdown(rows, levels)
    return {"endpoints": rows, "verdicts": verdict_rows, "rule": rule, "summary": summary, "markdown": md}


def exploratory(recs: list[dict], levels: list[str], design=None) -> dict:
    """The other surface forms measured (``--explore``), each against :data:`EXPLORATORY_REFERENCES` by the rule's
    endpoints in a Holm family of their own; not part of the verdict. Empty when none was measured."""
    present = [x for x in EXPLORATORY if any(r["lever"] == x for r in recs)]
    if not present:
        return {}
    family = [(x, ref) for x in present for ref in EXPLORATORY_REFERENCES]
    doc = endpoint_verdict(recs, levels, design or Design(), family, tuple(present), EXPLORATORY_REFERENCES)
    return {**doc, "levers": lever_table(recs, levels, present),
            "markdown": "Other surface forms (exploratory, not part of the verdict):\n\n" + doc["markdown"]}


def _csv(rows: list[dict]) -> str:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, keys)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def cost_table(units: list[dict]) -> list[dict]:
    """Per lever: its parameters and the median CPU-seconds of one (concept, seed): all of it (training, the
    KL bisection, the readings) and the training alone."""
    out = []
    for lever in LEVERS:
        rows = [u for u in units if u["lever"] == lever]
        if rows:
            out.append({"lever": lever, "params": int(np.median([u["params"] for u in rows])), "n_units": len(rows),
                        "cpu_seconds": float(np.median([u["cpu_seconds"] for u in rows])),
                        "train_cpu_seconds": float(np.median([u["train_cpu_seconds"] for u in rows]))})
    return out


def cost_markdown(costs: list[dict]) -> str:
    lines = ["| lever | parameters | CPU-s per concept and seed (median) | of which training | units |",
             "|---|---|---|---|---|"]
    lines += [f"| {c['lever']} | {c['params']:,} | {c['cpu_seconds']:.0f} | {c['train_cpu_seconds']:.0f} | "
              f"{c['n_units']} |" for c in costs]
    return "\n".join(lines) + "\n"


TEXT_FIELDS = frozenset({"concept", "kind", "direction", "lever", "kl_level", "prompt", "text", "keyword_words"})


def _typed(key: str, value: str):
    """A CSV cell back as the report wrote it: '' is None, True/False booleans, numbers numbers."""
    if key in TEXT_FIELDS:
        return value
    if value == "":
        return None
    if value in ("True", "False"):
        return value == "True"
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


def read_tables(folder: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """(records, concepts, units) read back from a report's records.csv, concepts.csv and units.csv, typed as
    :func:`records` returns them: the committed results can be re-read without their checkpoints."""
    out = [[{k: _typed(k, v or "") for k, v in row.items()} for row in read_csv_rows(Path(folder) / name, what=name)]
           for name in ("records.csv", "concepts.csv", "units.csv")]
    return out[0], out[1], out[2]


def write_report(out: Path, design) -> dict:
    """records.csv, concepts.csv, units.csv, results.json, axbench_view.csv and verdict.txt under ``out``; the
    results document."""
    out = Path(out)
    levels = [level_key(t) for t in design.kl_levels]
    recs, concepts, units = records(out, levels)
    atomic_write_text(out / "records.csv", _csv(recs))
    atomic_write_text(out / "concepts.csv", _csv(concepts))
    atomic_write_text(out / "units.csv", _csv(units))
    steps = T.step_rows(_units(out))
    if steps:
        atomic_write_text(out / "training.csv", _csv(steps))
    return write_results(out, design, recs, concepts, units)


def write_results(out: Path, design, recs: list[dict], concepts: list[dict], units: list[dict]) -> dict:
    """results.json, axbench_view.csv and verdict.txt under ``out`` from the tidy records (:func:`records`, or the
    committed CSV files read back by :func:`read_tables`); the results document."""
    levels = [level_key(t) for t in design.kl_levels]  # the frontier's
    rule_levels = [level_key(t) for t in decision_levels(design)]  # the decision rule's
    comps, old = verdicts(recs, rule_levels, EQUIVALENCE_MARGIN, ALPHA) if recs else ([], [])
    rule = endpoint_verdict(recs, rule_levels, design) if recs else {"endpoints": [], "verdicts": [], "rule": {},
                                                                     "summary": "", "markdown": ""}
    kinds = {f"{a}-{b}@{lv}": by_kind(recs, a, b, lv) for a, b in (("surfaces-rank1", "stock"),
             ("surfaces-rank1", "prompting"), ("surfaces-rank1", "lora"), ("lora", "stock"),
             ("prompting", "stock")) for lv in rule_levels} if recs else {}
    lrs = _learning_rates(Path(out))
    measured = [*LEVERS, *(x for x in EXPLORATORY if any(r["lever"] == x for r in recs))]
    front = frontier(recs, levels, measured)
    training = T.summary(units, lrs)
    doc = {"model": _model(Path(out)), "draws": _draws(Path(out)), "design": design.to_dict(), "kl_levels": levels,
           "decision_levels": rule_levels, "learning_rates": lrs, "frontier": front, "training": training,
           "strength_outside": [{k: r[k] for k in ("lever", "kl_level", "units", "strength_outside")}
                                for r in front if r["strength_outside"]],
           "concepts": concepts, "levers": lever_table(recs, levels), "rule": rule["rule"],
           "endpoints": rule["endpoints"], "verdicts": rule["verdicts"], "summary": rule["summary"],
           "earlier_rule": {"what": "AxBench's score alone, hierarchical bootstrap, Holm over (pair, KL level); "
                                    "superseded", "comparisons": comps, "verdicts": old},
           "by_kind": kinds, "units": units, "costs": cost_table(units)}
    doc["axbench_view"] = A.view(recs, levels, measured)
    atomic_write_text(Path(out) / A.CSV_NAME, _csv(doc["axbench_view"]["choices"]))
    doc["markdown"] = "\n".join(x for x in (rule["markdown"], frontier_markdown(front, levels),
                                            A.markdown(doc["axbench_view"]), T.summary_markdown(training),
                                            cost_markdown(doc["costs"])) if x)
    extra = exploratory(recs, levels, design) if recs else {}
    if extra:
        doc["exploratory"] = extra
        doc["markdown"] += "\n" + extra["markdown"]
    if doc["draws"]:
        doc["markdown"] += "\n" + summary_line(doc["draws"]) + "\n"
    atomic_write_text(Path(out) / "results.json", json.dumps(doc, indent=1, allow_nan=True) + "\n")
    atomic_write_text(Path(out) / "verdict.txt", doc["markdown"])
    _figure(Path(out))
    return doc


def decision_levels(design) -> tuple[float, ...]:
    """The levels the decision rule reads: the design's ``decision_levels`` (an earlier design: all its levels)."""
    return tuple(getattr(design, "decision_levels", None) or design.kl_levels)


def _learning_rates(out: Path) -> dict | None:
    path = out / "learning_rates.json"
    if not path.is_file():
        return None
    from geosteer.readers import read_json

    return read_json(path, what="learning_rates.json")


def _state(out: Path) -> dict:
    """The run folder's recorded state (``decide_state.json``; empty: no record)."""
    from geosteer.bench.design import STATE_FILE
    from geosteer.readers import read_json

    path = out / STATE_FILE
    doc = read_json(path, what=STATE_FILE) if path.is_file() else {}
    return doc if isinstance(doc, dict) else {}


def _model(out: Path) -> str | None:
    """The steered model the run folder records (None: no record)."""
    return _state(out).get("model")


def _draws(out: Path) -> dict | None:
    """What a seed of the run redraws and keeps, as the run folder records it (None: no record)."""
    draws = _state(out).get("draws")
    return draws if isinstance(draws, dict) else None


def _figure(out: Path) -> Path | None:
    """The frontier figure beside results.json (:mod:`geosteer.bench.decide_frontier`); None without plotly."""
    from geosteer.bench.decide_frontier import write_figure

    try:
        return write_figure(out / "results.json", out / FIGURE)
    except ImportError:
        return None
