"""Statuses computed from the results files: each item's named values are read, then its criteria are
tested; the status follows from the outcomes and the kind of the paper's sentence, never from a flag a
results file carries.

- not run: no results file, or a value unreadable;
- goes beyond / definition: the sentence is future work or a limitation / a procedure, not a finding; an item
  whose criteria only test the run's setup against the paper's procedure (role ``setup``) quotes a procedure;
- diverges: a criterion testing the headline claim fails (decided beyond 2 s.e. where a s.e. is given);
- inconclusive: none fails but one lies within 2 s.e. of its bound;
- partial: the headline holds, but a magnitude, another part of the claim or the setup fails, a part is
  untested, the paper states a number that no magnitude criterion tests, a criterion compares geosteer with
  itself (``against: self``), or the paper states no number at all (a formula excepted: its number is the
  identity);
- reproduces: every criterion holds, every number the paper states is tested, and at least one is."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from geosteer_paper.reproduction.checks import CHECKS_FILE, COMMAND, read_checks
from geosteer_paper.reproduction.items import Criterion, Item, PaperItems
from geosteer_paper.reproduction.query import NotReadable, evaluate_query, read_results

STATUSES = ("reproduces", "partial", "diverges", "inconclusive", "goes beyond", "definition", "not run")
Z = 2.0  # a criterion is undecided when its value lies within Z standard errors of its bound
ALPHA = 0.05  # ... or when the p-value it names is above ALPHA


@dataclass
class ItemResult:
    """One item with geosteer's values and its computed status."""

    paper: str
    item: Item
    ours: dict[str, float] = field(default_factory=dict)
    status: str = "not run"
    why: str = ""  # the outcome of each criterion, or the reason it did not run
    tests: list[dict] = field(default_factory=list)  # per criterion: the quote, its role, outcome and test

    def record(self) -> dict:
        """The JSON record of the report (one per item)."""
        it = self.item
        return {"paper": self.paper, "item": f"{it.id} {it.name}", "id": it.id, "name": it.name,
                "claim": it.claim, "paper_value": it.paper_value, "ours": self.ours or None,
                "status": self.status, "why": self.why, "reading": it.reading, "command": self.command,
                "model": it.model, "results_file": self.results_file, "claim_kind": it.claim_kind,
                "paper_numbers": it.paper_numbers or None, "tests": self.tests, "untested": it.untested or None,
                "paper_code": it.paper_code, "encoding": it.encoding}

    @property
    def results_file(self) -> str | None:
        return CHECKS_FILE if self.item.check else self.item.results_file

    @property
    def command(self) -> str | None:
        return COMMAND if self.item.check and not self.item.command else self.item.command


_STRICT = ("below", "above", "order", "sign")


def check(c: Criterion, ours: dict[str, float]) -> tuple[bool, str]:
    """Whether criterion ``c`` holds on the named values, and the one-line test it made."""
    if c.kind == "equals":
        return ours[c.value] == c.ref, _text(c, ours)
    margin = _margin(c, ours)
    return (margin > 0 if c.kind in _STRICT else margin >= 0), _text(c, ours)


def _margin(c: Criterion, ours: dict[str, float]) -> float:
    """The signed distance of the values from the criterion's bound: positive where it holds."""
    if c.kind == "order":
        vals = [ours[n] for n in c.values]
        return min(b - a for a, b in zip(vals[:-1], vals[1:], strict=True))
    if c.kind == "close":
        a, b = (ours[n] for n in c.values)
        return c.band - abs(a - b)
    if c.kind == "difference":
        a, b = (ours[n] for n in c.values)
        return min(b - a - c.lo, c.hi - (b - a))
    v = ours[c.value]
    if c.kind == "below":
        return c.threshold - v
    if c.kind == "above":
        return v - c.threshold
    if c.kind == "between":
        return min(v - c.lo, c.hi - v)
    if c.kind == "within_rel":
        return (c.band - abs(v - c.ref) / abs(c.ref)) * abs(c.ref) if c.ref else -float("inf")
    if c.kind == "within_abs":
        return c.band - abs(v - c.ref)
    if c.kind == "sign":
        return v * c.sign
    return -abs(v - c.ref)  # equals


def _text(c: Criterion, ours: dict[str, float]) -> str:
    if c.kind == "order":
        return " < ".join(f"{n} {_g(ours[n])}" for n in c.values)
    if c.kind == "close":
        a, b = (ours[n] for n in c.values)
        return f"|{c.values[0]} {_g(a)} − {c.values[1]} {_g(b)}| <= {_g(c.band)}"
    if c.kind == "difference":
        a, b = (ours[n] for n in c.values)
        return f"{_g(c.lo)} <= {c.values[1]} {_g(b)} − {c.values[0]} {_g(a)} = {_g(b - a)} <= {_g(c.hi)}"
    v = ours[c.value]
    name = f"{c.value} {_g(v)}"
    if c.kind == "below":
        return f"{name} < {_g(c.threshold)}"
    if c.kind == "above":
        return f"{name} > {_g(c.threshold)}"
    if c.kind == "between":
        return f"{_g(c.lo)} <= {name} <= {_g(c.hi)}"
    if c.kind == "within_rel":
        rel = abs(v - c.ref) / abs(c.ref) if c.ref else float("inf")
        return f"{name} within {c.band:.0%} of {_g(c.ref)} (off by {rel:.0%})"
    if c.kind == "within_abs":
        return f"{name} within ±{_g(c.band)} of {_g(c.ref)}"
    if c.kind == "sign":
        return f"{name} {'> 0' if c.sign > 0 else '< 0'}"
    return f"{name} == {_g(c.ref)}"


def decide(c: Criterion, ours: dict[str, float]) -> tuple[str, str]:
    """("holds" | "fails" | "undecided", the test made): undecided when the criterion names a p-value above
    :data:`ALPHA`, or standard errors and its value lies within :data:`Z` of them from its bound."""
    ok, text = check(c, ours)
    if c.p is not None and ours[c.p] > ALPHA:
        return "undecided", text + f" (p {_g(ours[c.p])} > {ALPHA:g})"
    if c.se:
        se = sum(ours[n] ** 2 for n in c.se) ** 0.5
        margin = _margin(c, ours)
        text += f" (s.e. {_g(se)})"
        if abs(margin) <= Z * se:
            return "undecided", text + f": within {Z:g} s.e. of the bound"
    return ("holds" if ok else "fails"), text


def _g(x: float) -> str:
    return f"{x:.4g}"


def _results_path(item_file: str, roots: list[Path]) -> Path:
    """``item_file`` under the first root that holds it, as written (relative to the repository root) or
    with its leading ``docs/results/`` dropped (a root that is a results folder itself)."""
    short = item_file.removeprefix("docs/results/")
    for root in roots:
        for rel in (item_file, short):
            if (root / rel).is_file():
                return root / rel
    return roots[0] / item_file


def _g_or_zero(x: float) -> str:
    return "0" if x == 0 else f"{x:.2g}"


def _within(row: dict) -> bool:
    """A check record holds when its error, a finite number, is within its tolerance (its ``pass`` field,
    written by whoever wrote the file, is never read)."""
    try:
        err, tol = float(row["max_abs_error"]), float(row["tolerance"])
    except (TypeError, ValueError):
        return False
    return math.isfinite(err) and math.isfinite(tol) and err <= tol


def evaluate_check(res: ItemResult, rows: list[dict]) -> ItemResult:
    """A check item's status from its records: reproduces when every error is within its tolerance."""
    if not rows:
        res.why = f"no record of this item in {Path(CHECKS_FILE).name}"
        return res
    parts, failed = [], []
    for name in dict.fromkeys(r["check"] for r in rows):
        sel = [r for r in rows if r["check"] == name]
        worst = max(_float(r["max_abs_error"]) for r in sel)
        fams = [r["family"] for r in sel if r["family"] != "synthetic"]
        on = f"on {len(fams)} families" if fams else "on synthetic inputs"
        parts.append(f"{name}: max error {_g_or_zero(worst)} (tolerance {_g_or_zero(_float(sel[0]['tolerance']))}) "
                     f"{on}")
        failed += [f"{name} on {r['family']}" for r in sel if not _within(r)]
    res.ours = {"max_abs_error": max(_float(r["max_abs_error"]) for r in rows)}
    res.status = "diverges" if failed else "reproduces"
    res.why = ("fails: " + ", ".join(failed) + "; " if failed else "checked: ") + "; ".join(parts)
    return res


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def status_of(item: Item, outcomes: list[tuple[Criterion, str]]) -> str:
    """The status that the criteria's outcomes ("holds" / "fails" / "undecided") and the item give."""
    if item.claim_kind in ("future work", "limitation", "extension"):
        return "goes beyond"
    if item.claim_kind == "procedure" or (outcomes and all(c.role == "setup" for c, _ in outcomes)):
        return "definition"
    if any(o == "fails" and c.role == "claim" for c, o in outcomes):
        return "diverges"
    if any(o == "undecided" for _, o in outcomes):
        return "inconclusive"
    if (any(o == "fails" for _, o in outcomes) or item.untested or _numbers_untested(item, outcomes)
            or _self_compared(outcomes) or _no_paper_number(item)):
        return "partial"
    return "reproduces"


def _numbers_untested(item: Item, outcomes) -> bool:
    """The paper states numbers and no criterion compares with them (a magnitude or setup criterion)."""
    return bool(item.paper_numbers) and not any(c.role in ("magnitude", "setup") for c, *_ in outcomes)


def _self_compared(outcomes) -> bool:
    """A criterion whose bound is geosteer's own number: it tests the project against itself."""
    return any(c.against == "self" for c, *_ in outcomes)


def _no_paper_number(item: Item) -> bool:
    """The paper states no number for the claim (a formula's number is its identity, tested by its check)."""
    return not item.paper_numbers and item.claim_kind != "formula"


def _why(item: Item, outcomes: list[tuple[Criterion, str, str]], status: str) -> str:
    parts = [f"{o}{'' if c.role == 'claim' else f' ({c.role})'}"
             f"{' against geosteer itself' if c.against == 'self' else ''}: {t}" for c, o, t in outcomes]
    if _numbers_untested(item, outcomes):
        parts.append("the paper's numbers (" + ", ".join(_g(x) for x in item.paper_numbers)
                     + ") are tested by no criterion")
    parts += [f"untested: {u}" for u in item.untested]
    if status == "partial":
        if _self_compared(outcomes):
            parts.append("a criterion compares geosteer with itself, so the item cannot reproduce")
        if _no_paper_number(item):
            parts.append("the paper states no number for this claim: at most partial")
    if status == "goes beyond":
        parts.insert(0, f"the paper states {item.claim_kind}, not a finding")
    elif status == "definition":
        parts.insert(0, "the paper states a procedure, not a finding")
    return "; ".join(parts)


def evaluate_item(paper: str, item: Item, roots: list[Path]) -> ItemResult:
    """Read ``item``'s values from its results file (looked up under each root in turn) and test them."""
    res = ItemResult(paper=paper, item=item)
    if item.check:
        return evaluate_check(res, read_checks(_results_path(CHECKS_FILE, roots)).get(item.id, []))
    if item.results_file is None:
        res.why = "no results file"
        return res
    cache: dict[str, object] = {}
    try:
        for name, q in item.ours.items():
            rel = q.file or item.results_file
            if rel not in cache:
                cache[rel] = read_results(_results_path(rel, roots))
            try:
                res.ours[name] = evaluate_query(cache[rel], q)
            except NotReadable as e:
                raise NotReadable(f"{name}: {e} in {Path(rel).name}") from None
    except NotReadable as e:
        res.ours, res.why = {}, str(e)
        return res
    outcomes = [(c, *decide(c, res.ours)) for c in item.criteria]
    res.tests = [{"claim": c.claim, "role": c.role, "outcome": o, "test": t} for c, o, t in outcomes]
    res.status = status_of(item, [(c, o) for c, o, _ in outcomes])
    res.why = _why(item, outcomes, res.status)
    return res


def evaluate_items(papers: list[PaperItems], roots: list[Path]) -> list[ItemResult]:
    """Every item of every paper, in paper and item order."""
    return [evaluate_item(p.paper, it, roots) for p in papers for it in p.items]


def counts(results: list[ItemResult]) -> list[dict]:
    """Items per paper and status, plus an 'all' row."""
    papers = list(dict.fromkeys(r.paper for r in results))
    rows = []
    for p in papers + ["all"]:
        sel = [r for r in results if p in ("all", r.paper)]
        rows.append({"paper": p, "items": len(sel), **{s: sum(r.status == s for r in sel) for s in STATUSES}})
    return rows
