"""The report's three faces: markdown (the docs page), a self-contained HTML page, and JSON records."""

from __future__ import annotations

import html
import json

from geosteer_paper.reproduction.checks import COMMAND
from geosteer_paper.reproduction.evaluate import STATUSES, ItemResult, counts

_MARK = {"reproduces": "✔ reproduces", "partial": "◐ partial", "diverges": "✘ diverges",
         "inconclusive": "? inconclusive", "goes beyond": "→ goes beyond", "definition": "= definition",
         "not run": "· not run"}
_ENCODING = {"bos-first": "measured with texts encoded BOS-first (geosteer's encoding at the time; `--bos` "
                          "reproduces it)",
             "tokenizer": "measured with texts encoded as the model's tokenizer encodes them",
             "bos-window": "measured on held-out windows that each start with the BOS token (the dynamics verbs' "
                           "protocol, unchanged)",
             "none": "no text encoding involved"}
_LEGEND = ("Statuses are computed from the numbers, never chosen and never read from a verdict a results file "
           "carries. **reproduces**: every criterion holds, the paper states a number (a formula's is its "
           "identity) and every number it states is tested against the paper's own band; **partial**: the "
           "headline claim holds, but a number the paper states is missed or untested, another part of the claim "
           "fails or is not assessed, a criterion compares geosteer with its own number, or the paper states no "
           "number at all; **diverges**: a "
           "criterion on the headline claim fails; **inconclusive**: none fails, but one lies within two "
           "standard errors of its bound (or names a p-value above 0.05); **goes beyond**: the paper's sentence "
           "is future work, a limitation or an extension, so there is nothing to reproduce; **definition**: the "
           "sentence states a procedure, not a finding (so does an item whose criteria only check the run's setup "
           "against the paper's procedure); **not run**: no results file. Each criterion quotes "
           "the paper's sentence it tests.")


def _claim_text(r: ItemResult) -> str:
    quotes = list(dict.fromkeys(c.claim for c in r.item.criteria))
    return r.item.claim + "".join(f" “{q}”" for q in quotes)


def _reading(r: ItemResult) -> str:
    it = r.item
    text = it.reading
    if it.encoding is not None and it.encoding != "none":
        text += f" Encoding: {_ENCODING[it.encoding]}."
    if it.paper_code:
        text += f" The paper's code: {it.paper_code}"
    return text


def _ours_text(r: ItemResult) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in r.ours.items()) if r.ours else "—"


def _paper_value(r: ItemResult) -> str:
    v = r.item.paper_value
    return "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def report_markdown(results: list[ItemResult], command: str, titles: dict[str, str],
                    extra: list[str] | None = None) -> str:
    """The markdown report: counts per paper and status, one table per paper, then ``extra`` lines (the
    scale ladder)."""
    lines = ["# Reproduction report", "",
             "Every item of the three papers: the paper's claim and number, geosteer's number read from its "
             "results file, and a status computed from the criterion declared beside the item "
             "(`paper/src/geosteer_paper/reproduction/items/`; the paper package, `pip install -e ./paper` from a "
             "clone, `make dev` installs it). An item without a results file is *not run*, "
             "never a number. A formula item is checked against an independent reference on the tiny model "
             f"families by `{COMMAND}`; it reproduces when every error is within its check's tolerance.",
             "", _LEGEND, "", f"Built with `{command}`.", "",
             "| paper | items | " + " | ".join(STATUSES) + " |", "|---|---|" + "---|" * len(STATUSES)]
    for row in counts(results):
        lines.append(f"| {titles.get(row['paper'], row['paper'])} | {row['items']} | "
                     + " | ".join(str(row[s]) for s in STATUSES) + " |")
    for paper in dict.fromkeys(r.paper for r in results):
        lines += ["", f"## {titles.get(paper, paper)}", "",
                  "| item | claim | paper | ours | status | test or reason | reading | results file |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in (x for x in results if x.paper == paper):
            it = r.item
            src = f"`{r.results_file}`" if r.results_file else "—"
            if r.command:
                src += f"<br>`{_cell(r.command)}`"
            model = f" ({it.model})" if it.model and r.ours else ""
            lines.append("| " + " | ".join(_cell(x) for x in [
                f"{it.id} {it.name}", _claim_text(r), _paper_value(r), _ours_text(r) + model, _MARK[r.status],
                r.why, _reading(r), src]) + " |")
    if extra:
        lines += ["", *extra]
    return "\n".join(lines) + "\n"


def report_json(results: list[ItemResult], command: str) -> str:
    """``{"command", "counts", "items"}``: one record per item (:meth:`ItemResult.record`)."""
    return json.dumps({"command": command, "counts": counts(results),
                       "items": [r.record() for r in results]}, indent=2, ensure_ascii=False) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:110em}table{border-collapse:collapse;
margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .5em;vertical-align:top;font-size:.9em}th{background:#f3f3f3}
.reproduces{background:#e6f4e6}.partial{background:#f4f1dc}.diverges{background:#fbe4e4}
.inconclusive{background:#e8eef8}.goesbeyond{background:#f3ecf7}.definition{background:#f6f6f0}
.notrun{background:#f1f1f1;color:#555}
.bar{display:flex;height:1.2em;width:30em}.bar div{height:100%}code{font-size:.85em}"""
_COLOURS = {"reproduces": "#5cb85c", "partial": "#d8c25a", "diverges": "#d9534f", "inconclusive": "#7a9bd0",
            "goes beyond": "#a883c0", "definition": "#c9c9a0", "not run": "#bbb"}


def _bar(row: dict) -> str:
    parts = "".join(f'<div title="{s}: {row[s]}" style="width:{100 * row[s] / max(row["items"], 1):.1f}%;'
                    f'background:{_COLOURS[s]}"></div>' for s in STATUSES)
    return f'<div class="bar">{parts}</div>'


def report_html(results: list[ItemResult], command: str, titles: dict[str, str]) -> str:
    """A self-contained page (no external assets): the counts with a status bar per paper, then the tables."""
    e = html.escape
    out = [f"<!doctype html><meta charset='utf-8'><title>Reproduction report</title><style>{_CSS}</style>",
           "<h1>Reproduction report</h1>", f"<p>Built with <code>{e(command)}</code>. "
           f"{e(_LEGEND.replace('**', ''))}</p>",
           "<table><tr><th>paper</th><th>items</th>" + "".join(f"<th>{s}</th>" for s in STATUSES)
           + "<th></th></tr>"]
    for row in counts(results):
        out.append(f"<tr><td>{e(titles.get(row['paper'], row['paper']))}</td><td>{row['items']}</td>"
                   + "".join(f"<td>{row[s]}</td>" for s in STATUSES) + f"<td>{_bar(row)}</td></tr>")
    out.append("</table>")
    for paper in dict.fromkeys(r.paper for r in results):
        out.append(f"<h2>{e(titles.get(paper, paper))}</h2><table><tr><th>item</th><th>claim</th><th>paper</th>"
                   "<th>ours</th><th>status</th><th>test or reason</th><th>reading</th><th>results file</th></tr>")
        for r in (x for x in results if x.paper == paper):
            it = r.item
            src = f"<code>{e(r.results_file)}</code>" if r.results_file else "—"
            if r.command:
                src += f"<br><code>{e(r.command)}</code>"
            cls = r.status.replace(" ", "")
            out.append(f"<tr class='{cls}'><td>{e(it.id)} {e(it.name)}</td><td>{e(_claim_text(r))}</td>"
                       f"<td>{e(_paper_value(r))}</td><td>{e(_ours_text(r))}</td><td>{e(r.status)}</td>"
                       f"<td>{e(r.why)}</td><td>{e(_reading(r))}</td><td>{src}</td></tr>")
        out.append("</table>")
    return "\n".join(out) + "\n"
