"""``geosteer bench decide``'s verdict recomputed without the report's code, checked, and read other ways.

Reads a report folder (``records.csv`` and ``results.json``, what ``bench decide`` and ``bench decide
--report-only`` write) and recomputes the decision rule from its definition (docs/steering-decision.md) with
numpy and scipy.stats alone; nothing of geosteer is imported. A report whose design records the test prompt as its
unit (``--design instruct``) is recomputed per concept over the prompts (decide_recompute_prompt.py). Per (lever,
reference, endpoint, KL level): the paired differences per (concept, seed, prompt) of the admitted records, their
mean per concept, the mean of the concept means with its concept-level t interval (C - 1 degrees of freedom)
and two-sided p (against 0 for the concept, against -margin for a cost); per claim (pair, tested endpoint) the
larger p of the rule's levels, Holm over the claims made, each claim's intervals at alpha / (m - rank + 1); the
readings and the word per pair.
Every value is compared with ``results.json`` and each mismatch printed (exit 1 when any). It also says where
Holm's step-down (stop at the first claim not rejected) would reject other claims than the intervals show.

The alternatives, each a Holm family of its own: seed 0 alone, seed 1 alone, the promoted or the suppressed
topics alone, either alternate half of the concepts (sorted by name), without each concept in turn, and the
words read off BCa bootstrap intervals (scipy, 20,000 replicates, seed 0) instead of the t intervals. Where the
folder holds ``sensitivity.json`` (benchmarks/decide_reanalysis.py), its subsets' words are checked too.

    .venv/bin/python benchmarks/decide_recompute.py --results docs/results/decide --json recompute.json
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from scipy import stats

ALPHA = 0.05
MARGIN = {"concept": 0.02, "fluency": 0.10, "relevance": 0.10}
FIELD = {"concept": "concept_score", "fluency": "reader_logprob", "relevance": "relevance", "score": "score"}
TESTED = ("concept", "fluency", "relevance")
LEVERS = ("surfaces-rank1", "walls", "lora", "loreft", "vector", "caa", "prompting")
REFERENCES = ("stock", "prompting", "lora")
EXPLORATORY_REFERENCES = ("stock", "lora", "surfaces-rank1")
NUMBERS = ("mean", "se", "df", "lo", "hi", "p", "p_claim", "p_holm", "alpha_ci", "n_concepts", "n_items")
N_BCA = 20000
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "decide"


class BadInput(Exception):
    """A folder this cannot read: one line, exit 2."""


def load(folder: Path) -> tuple[dict, dict, dict]:
    """(table, kinds, report): table[(lever, kl_level)][(concept, seed, prompt)] = {endpoint: value} of the
    admitted records; kinds: concept -> kind; report: results.json."""
    for name in ("records.csv", "results.json"):
        if not (folder / name).is_file():
            raise BadInput(f"--results {folder}: no {name} (run `geosteer bench decide --out DIR --report-only` first)")
    try:
        report = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadInput(f"--results {folder}: results.json is not readable JSON ({e})") from None
    if not isinstance(report, dict) or not isinstance(report.get("endpoints"), list) or "verdicts" not in report:
        raise BadInput(f"--results {folder}: results.json holds no endpoints and verdicts (not a decide report)")
    table: dict = {}
    kinds: dict = {}
    with open(folder / "records.csv", newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        need = {"concept", "kind", "seed", "prompt", "lever", "kl_level", "admitted", *FIELD.values()}
        missing = sorted(need - set(reader.fieldnames or ()))
        if missing:
            raise BadInput(f"--results {folder}: records.csv has no column {missing[0]!r}")
        for row in reader:
            if row["admitted"] != "True":
                continue
            key = (row["concept"], int(row["seed"]), row["prompt"])
            cell = table.setdefault((row["lever"], row["kl_level"]), {})
            if key in cell:
                raise BadInput(f"--results {folder}: records.csv has two records of {row['lever']} for {key}")
            cell[key] = {ep: float(row[f]) if row[f] not in ("", "None") else math.nan for ep, f in FIELD.items()}
            kinds[row["concept"]] = row["kind"]
    if not table:
        raise BadInput(f"--results {folder}: records.csv holds no admitted record")
    return table, kinds, report


def rule_levels(report: dict) -> list[str]:
    """The decision rule's KL levels as the records name them (``f"{x:g}"``)."""
    design = report.get("design") or {}
    levels = report.get("decision_levels") or design.get("decision_levels") or design.get("kl_levels") or (0.05, 0.2)
    return [f"{float(x):g}" for x in levels]


def family(table: dict, explore: bool = False) -> list[tuple[str, str]]:
    """The pairs compared: every lever with each reference, a pair of references once (the later against the
    earlier); ``explore``: each other surface form measured against its own references."""
    if explore:
        forms = sorted({lv for lv, _ in table} - set(LEVERS) - {"stock"})
        return [(x, ref) for x in forms for ref in EXPLORATORY_REFERENCES]
    return [(lever, ref) for i, ref in enumerate(REFERENCES) for lever in LEVERS if lever not in REFERENCES[:i + 1]]


def concept_means(table: dict, a: str, b: str, level: str, endpoint: str, keep=None) -> tuple[np.ndarray, int]:
    """(the concept means of d = A - B, sorted by concept; the number of paired items)."""
    xa, xb = table.get((a, level), {}), table.get((b, level), {})
    per: dict[str, list[float]] = {}
    for key in sorted(xa.keys() & xb.keys()):
        d = xa[key][endpoint] - xb[key][endpoint]
        if not math.isnan(d) and (keep is None or keep(key)):
            per.setdefault(key[0], []).append(d)
    return np.array([np.mean(per[c]) for c in sorted(per)]), sum(len(v) for v in per.values())


def t_interval(means: np.ndarray, alpha: float, null: float) -> dict:
    """Mean of the concept means, its t interval at 1 - alpha and two-sided p against ``null`` (C >= 2)."""
    n = means.size
    out = {"mean": float(means.mean()) if n else None, "se": None, "df": n - 1 if n else None,
           "lo": None, "hi": None, "p": None}
    if n < 2:
        return out
    se = float(means.std(ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf(1 - alpha / 2, n - 1)) * se
    gap = out["mean"] - null
    p = float(2 * stats.t.sf(abs(gap) / se, n - 1)) if se > 0 else (0.0 if gap else 1.0)
    return {**out, "se": se, "lo": out["mean"] - half, "hi": out["mean"] + half, "p": min(1.0, p)}


def bca(means: np.ndarray, alpha: float) -> list[float] | None:
    """scipy's BCa bootstrap interval of the mean of the concept means (seed 0); None below 3 or no spread."""
    if means.size < 3 or np.ptp(means) == 0:
        return None
    seed = {"rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state":
            np.random.default_rng(0)}
    ci = stats.bootstrap((means,), np.mean, n_resamples=N_BCA, confidence_level=1 - alpha, method="BCa",
                         **seed).confidence_interval
    return [float(ci.low), float(ci.high)]


def reading(endpoint: str, lo, hi) -> str:
    """What an interval shows (docs/steering-decision.md, the decision rule)."""
    if lo is None or hi is None or endpoint == "score":
        return "–"
    m = MARGIN[endpoint]
    if endpoint == "concept":
        if lo > 0:
            return "gain"
        if hi < 0:
            return "reversed"
        return "no effect" if -m < lo and hi < m else "no gain shown"
    if lo > -m:
        return "non-inferior"
    return "harm" if hi < -m else "unclear"


def word(rows: list[dict]) -> str:
    """beats / worse / equivalent / undecided for one pair from its tested rows at every rule level."""
    tested = [r for r in rows if r["endpoint"] in TESTED]
    if not tested or any(r["lo"] is None for r in tested):
        return "undecided"
    levels = sorted({r["kl_level"] for r in tested})
    at = {(r["endpoint"], r["kl_level"]): r for r in tested}
    costs = ("fluency", "relevance")
    if all(at["concept", lv]["reading"] == "gain" and all(at[c, lv]["reading"] == "non-inferior" for c in costs)
           for lv in levels):
        return "beats"
    if all(at["concept", lv]["reading"] != "gain" and any(at[c, lv]["reading"] == "harm" for c in costs)
           for lv in levels):
        return "worse"
    if all(at["concept", lv]["reading"] == "no effect" and all(
            -MARGIN[c] < at[c, lv]["lo"] and at[c, lv]["hi"] < MARGIN[c] for c in costs) for lv in levels):
        return "equivalent"
    return "undecided"


def recompute(table: dict, pairs: list[tuple[str, str]], levels: list[str], keep=None,
              with_bca: bool = False) -> dict:
    """Every row, the word per pair and the Holm step-down check of one Holm family (module docstring)."""
    rows, claims = [], {}
    for a, b in pairs:
        for ep in (*TESTED, "score"):
            mine = []
            for lv in levels:
                means, n_items = concept_means(table, a, b, lv, ep, keep)
                null = -MARGIN[ep] if ep in ("fluency", "relevance") else 0.0
                mine.append({"a": a, "b": b, "endpoint": ep, "kl_level": lv, "n_concepts": int(means.size),
                             "n_items": n_items, **t_interval(means, ALPHA, null), "alpha_ci": ALPHA,
                             "p_claim": None, "p_holm": None, "_means": means, "_null": null})
            rows += mine
            if ep in TESTED and all(r["p"] is not None for r in mine):
                claims[(a, b, ep)] = mine
            elif ep in TESTED:
                for r in mine:
                    r.update(lo=None, hi=None)
    order = sorted(claims, key=lambda k: (max(r["p"] for r in claims[k]), list(claims).index(k)))
    m, running, stopped, differs = len(order), 0.0, False, []
    for rank, key in enumerate(order, start=1):
        p_claim, level = max(r["p"] for r in claims[key]), ALPHA / (m - rank + 1)
        running = max(running, min(1.0, (m - rank + 1) * p_claim))
        for r in claims[key]:
            t = t_interval(r["_means"], level, r["_null"])
            r.update(lo=t["lo"], hi=t["hi"], alpha_ci=level, p_claim=p_claim, p_holm=running)
        shown = all(not r["lo"] <= r["_null"] <= r["hi"] for r in claims[key])
        stepdown = not stopped and p_claim <= level
        stopped = stopped or not stepdown
        if shown != stepdown:
            differs.append(f"{'|'.join(key)}: interval {'shows' if shown else 'does not show'} it, "
                           f"step-down {'rejects' if stepdown else 'does not reject'}")
    for r in rows:
        r["reading"] = reading(r["endpoint"], r["lo"], r["hi"])
        r["bca"] = bca(r["_means"], r["alpha_ci"]) if with_bca and r["se"] is not None else None
    words = {(a, b): word([r for r in rows if (r["a"], r["b"]) == (a, b)]) for a, b in pairs}
    return {"rows": rows, "words": words, "claims": m, "stepdown_differs": differs}


def _close(x, y, rtol: float) -> bool:
    if x is None or y is None:
        return x is None and y is None
    return math.isclose(float(x), float(y), rel_tol=rtol, abs_tol=1e-12)


def check(mine: dict, endpoints: list[dict], verdicts: list[dict], rtol: float, where: str = "") -> tuple[list, int]:
    """(mismatches as lines, values compared) between the recomputation and a report's endpoints and verdicts."""
    theirs = {(r["a"], r["b"], r["endpoint"], str(r["kl_level"])): r for r in endpoints}
    bad, n = [], 0
    for r in mine["rows"]:
        key = (r["a"], r["b"], r["endpoint"], r["kl_level"])
        t = theirs.pop(key, None)
        if t is None:
            bad.append(f"{where}{' '.join(key)}: not in the report")
            continue
        for k in (*NUMBERS, "reading"):
            if k in t:
                n += 1
                same = t[k] == r[k] if k == "reading" else _close(r[k], t[k], rtol)
                if not same:
                    bad.append(f"{where}{' '.join(key)} {k}: recomputed {r[k]!r}, report {t[k]!r}")
    bad += [f"{where}{' '.join(k)}: in the report only" for k in theirs]
    words = {(v["lever"], v["versus"]): v["decision"] for v in verdicts}
    for pair, w in mine["words"].items():
        n += 1
        got = words.pop(pair, "no word")
        if got != w:
            bad.append(f"{where}{pair[0]} vs {pair[1]}: recomputed {w}, report {got}")
    bad += [f"{where}{a} vs {b}: a word in the report only" for a, b in words]
    return bad, n


def subsets(table: dict, kinds: dict) -> dict:
    """name -> a keep((concept, seed, prompt)) predicate (module docstring)."""
    names = sorted(kinds)
    seeds = sorted({k[1] for cell in table.values() for k in cell})
    out: dict = {f"seed {s} alone": (lambda k, s=s: k[1] == s) for s in seeds}
    for kind in sorted(set(kinds.values())):
        out[f"{kind} only"] = lambda k, kind=kind: kinds[k[0]] == kind
    for i, tag in enumerate("AB"):
        half = set(names[i::2])
        out[f"alternate half {tag} ({', '.join(sorted(half))})"] = lambda k, half=half: k[0] in half
    for c in names:
        out[f"without {c}"] = lambda k, c=c: k[0] != c
    return out


def summary(res: dict, keep=None, table=None) -> dict:
    """A family's words, the pairs not undecided and each lever's concept gain over stock."""
    vs_stock = {r["a"]: {} for r in res["rows"] if r["b"] == "stock"}
    for r in res["rows"]:
        if r["b"] == "stock" and r["endpoint"] == "concept":
            vs_stock[r["a"]][r["kl_level"]] = {k: r[k] for k in ("mean", "lo", "hi", "reading")}
    concepts = {k[0] for cell in (table or {}).values() for k in cell if keep is None or keep(k)}
    return {"n_concepts": len(concepts), "words": dict(Counter(res["words"].values())),
            "not_undecided": {f"{a} vs {b}": w for (a, b), w in res["words"].items() if w != "undecided"},
            "vs_stock_concept": vs_stock, "stepdown_differs": res["stepdown_differs"]}


def bca_view(res: dict, report_rows: list[dict]) -> dict:
    """The words read off the BCa intervals (at each claim's Holm level) instead of the t intervals; the largest
    gap to the report's own BCa ends (another resampling: information, not a check) and the BCa / t widths."""
    t_rows = {(r["a"], r["b"], r["endpoint"], r["kl_level"]): r for r in res["rows"]}
    alt = {k: {**r, "lo": r["bca"][0] if r["bca"] else None, "hi": r["bca"][1] if r["bca"] else None}
           for k, r in t_rows.items() if r["endpoint"] in TESTED and r["se"] is not None}
    changed = []
    for k, r in alt.items():
        r["reading"] = reading(r["endpoint"], r["lo"], r["hi"])
        if r["reading"] != t_rows[k]["reading"]:
            changed.append(f"{k[0]} vs {k[1]} {k[2]} at {k[3]}: {t_rows[k]['reading']} -> {r['reading']}")
    words = {f"{a} vs {b}": word([r for r in alt.values() if (r["a"], r["b"]) == (a, b)]) for a, b in res["words"]}
    theirs = {(r["a"], r["b"], r["endpoint"], str(r["kl_level"])): r.get("bca") for r in report_rows}
    gaps = [abs(x - y) for k, r in alt.items() if r["bca"] and theirs.get(k)
            for x, y in zip(r["bca"], theirs[k], strict=True)]
    ratios = [(r["hi"] - r["lo"]) / (t_rows[k]["hi"] - t_rows[k]["lo"]) for k, r in alt.items()
              if r["lo"] is not None and t_rows[k]["lo"] is not None and t_rows[k]["hi"] > t_rows[k]["lo"]]
    return {"tested_intervals": len(alt), "readings_changed": changed, "words": dict(Counter(words.values())),
            "not_undecided": {k: w for k, w in words.items() if w != "undecided"},
            "vs_stock_concept": summary({"rows": list(alt.values()), "words": {}, "stepdown_differs": []},
                                        )["vs_stock_concept"],
            "max_gap_to_report_bca": max(gaps) if gaps else None,
            "width_ratio_median": float(np.median(ratios)) if ratios else None}


def check_sensitivity(views: dict, doc: dict, rtol: float) -> list[str]:
    """Mismatches between the alternatives and a sensitivity.json of the same subsets (its words and each
    lever's concept gain over stock)."""
    bad = []
    for name, theirs in doc.get("subsets", {}).items():
        mine = views.get(name)
        if mine is None:
            bad.append(f"sensitivity {name}: no such subset here")
            continue
        for k in ("n_concepts", "words", "not_undecided"):
            if mine[k] != theirs.get(k):
                bad.append(f"sensitivity {name} {k}: recomputed {mine[k]}, reanalysis {theirs.get(k)}")
        for lever, by_level in theirs.get("vs_stock_concept", {}).items():
            for lv, t in by_level.items():
                r = mine["vs_stock_concept"].get(lever, {}).get(lv)
                for k in ("mean", "lo", "hi", "reading"):
                    a, b = (r or {}).get(k), (t or {}).get(k)
                    if not (a == b if k == "reading" else _close(a, b, rtol)):
                        bad.append(f"sensitivity {name} {lever} {lv} {k}: recomputed {a!r}, reanalysis {b!r}")
    mine, theirs = sorted(views["BCa instead of t"]["readings_changed"]), sorted(doc.get("bca", {}).get(
        "readings_changed", mine))
    bad += [f"sensitivity BCa: recomputed changes {x}" for x in mine if x not in theirs]
    return bad + [f"sensitivity BCa: reanalysis changes {x}" for x in theirs if x not in mine]


def alternatives(table: dict, kinds: dict, levels: list[str], report: dict, main: dict) -> dict:
    """Every view (module docstring): its summary; ``BCa instead of t`` the BCa reading of all the data."""
    views = {"all": summary(main, None, table)}
    for name, keep in subsets(table, kinds).items():  # the pairs whose lever has a record in the subset
        have = {lv for (lv, _), cell in table.items() if any(keep(k) for k in cell)}
        res = recompute(table, [p for p in family(table) if p[0] in have], levels, keep)
        views[name] = summary(res, keep, table)
    views["BCa instead of t"] = bca_view(main, report["endpoints"])
    return views


def _fmt(c: dict | None) -> str:
    return "–" if not c or c["lo"] is None else f"{c['mean']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] {c['reading']}"


def markdown(doc: dict, main: dict, levels: list[str]) -> str:
    """The recomputed verdict per lever, then one line per view."""
    head = (f"Recomputed from {doc['results']} (numpy and scipy, not the report's code): {doc['compared']} values "
            f"compared with results.json, {len(doc['mismatches'])} mismatches; Holm over {main['claims']} claims, "
            f"step-down differs from the intervals on {len(main['stepdown_differs'])}.\n\n")
    rows = ["| lever | " + " | ".join(f"vs {r}" for r in REFERENCES) + " | "
            + " | ".join(f"concept gain over stock, KL {lv}" for lv in levels) + " |",
            "|---|" + "---|" * (len(REFERENCES) + len(levels))]
    stock = doc["views"]["all"]["vs_stock_concept"]
    for lever in LEVERS:
        w = [main["words"].get((lever, r), "–") for r in REFERENCES]
        rows.append(f"| {lever} | " + " | ".join(w) + " | "
                    + " | ".join(_fmt(stock.get(lever, {}).get(lv)) for lv in levels) + " |")
    views = ["| view | concepts | words | not undecided | concept gain over stock shown |", "|---|---|---|---|---|"]
    for name, v in doc["views"].items():
        gains = "; ".join(f"{lever} ({', '.join(lv for lv, c in by.items() if c and c['reading'] == 'gain')})"
                          for lever, by in v.get("vs_stock_concept", {}).items()
                          if any(c and c["reading"] == "gain" for c in by.values()))
        words = ", ".join(f"{k} {n}" for k, n in sorted(v["words"].items()))
        views.append(f"| {name} | {v.get('n_concepts', doc['views']['all']['n_concepts'])} | {words} | "
                     f"{', '.join(f'{k}: {w}' for k, w in v['not_undecided'].items()) or '–'} | {gains or '–'} |")
    return head + "\n".join(rows) + "\n\n" + "\n".join(views) + "\n"


def unit(report: dict) -> str:
    """The unit the report's design records ("concept" unless its design or rule says "prompt"); a report whose
    design and rule disagree, or that names another unit, is refused."""
    design = (report.get("design") or {}).get("extra") or {}
    got = {x for x in (design.get("unit"), (report.get("rule") or {}).get("unit")) if x is not None}
    if len(got) > 1 or not got <= {"concept", "prompt"}:
        raise BadInput(f"results.json records the unit {' and '.join(sorted(map(str, got)))}: expected one of "
                       "concept, prompt")
    return got.pop() if got else "concept"


def run_prompt(folder: Path, table: dict, report: dict, levels: list[str], rtol: float) -> dict:
    """The check of a report whose unit is the test prompt (decide_recompute_prompt.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import decide_recompute_prompt as P

    def fam(explore: bool = False) -> list[tuple[str, str]]:
        return family(table, explore)

    main = P.recompute(table, fam(), levels, TESTED, MARGIN, ALPHA, reading, word)
    bad, n = P.check(main, report["endpoints"], report["verdicts"], rtol, _close)
    extra = report.get("exploratory") or {}
    if extra or fam(True):
        res = P.recompute(table, fam(True), levels, TESTED, MARGIN, ALPHA, reading, word)
        more, k = P.check(res, extra.get("endpoints", []), extra.get("verdicts", []), rtol, _close, "exploratory: ")
        bad, n = bad + more, n + k
    return {"results": str(folder), "unit": "prompt", "levels": levels, "rtol": rtol, "compared": n,
            "mismatches": bad, "stepdown_differs": [],
            "endpoints": [{k: v for k, v in r.items() if k[0] != "_"} for r in main["rows"]],
            "verdicts": [{"concept": c, "lever": a, "versus": b, "decision": w}
                         for (c, a, b), w in main["words"].items()],
            "markdown": P.markdown(str(folder), main, bad, n)}


def run(folder: Path, rtol: float = 1e-7) -> dict:
    """The whole check on a report folder: the tidy document (``mismatches`` empty when all agree); a report whose
    unit is the test prompt is checked by :func:`run_prompt`."""
    table, kinds, report = load(folder)
    levels = rule_levels(report)
    if unit(report) == "prompt":
        return run_prompt(folder, table, report, levels, rtol)
    main = recompute(table, family(table), levels, with_bca=True)
    bad, n = check(main, report["endpoints"], report["verdicts"], rtol)
    extra = report.get("exploratory") or {}
    if extra or family(table, explore=True):
        res = recompute(table, family(table, explore=True), levels)
        more, k = check(res, extra.get("endpoints", []), extra.get("verdicts", []), rtol, "exploratory: ")
        bad, n = bad + more, n + k
    doc = {"results": str(folder), "unit": "concept", "levels": levels, "rtol": rtol, "compared": n, "mismatches": bad,
           "stepdown_differs": main["stepdown_differs"],
           "endpoints": [{k: v for k, v in r.items() if k[0] != "_"} for r in main["rows"]],
           "verdicts": [{"lever": a, "versus": b, "decision": w} for (a, b), w in main["words"].items()],
           "views": alternatives(table, kinds, levels, report, main)}
    if (folder / "sensitivity.json").is_file():
        doc["sensitivity_mismatches"] = check_sensitivity(
            doc["views"], json.loads((folder / "sensitivity.json").read_text(encoding="utf-8")), rtol)
    doc["markdown"] = markdown(doc, main, levels)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="a report folder (records.csv, results.json)")
    ap.add_argument("--json", type=Path, default=None, help="write the tidy document here")
    ap.add_argument("--markdown", type=Path, default=None, help="write the tables here")
    ap.add_argument("--rtol", type=float, default=1e-7, help="relative tolerance of a match (absolute: 1e-12)")
    args = ap.parse_args(argv)
    if not (0 <= args.rtol < 1):
        print(f"--rtol {args.rtol}: expected a tolerance in [0, 1)", file=sys.stderr)
        return 2
    try:
        doc = run(args.results, args.rtol)
    except BadInput as e:
        print(e, file=sys.stderr)
        return 2
    for line in doc["mismatches"] + doc.get("sensitivity_mismatches", []) + doc["stepdown_differs"]:
        print(line)
    print(doc["markdown"], end="")
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if args.markdown is not None:
        args.markdown.write_text(doc["markdown"], encoding="utf-8")
    return 1 if doc["mismatches"] or doc.get("sensitivity_mismatches") else 0


if __name__ == "__main__":
    sys.exit(main())
