"""Figures from any tidy result file (``{"meta": ..., "rows": [...]}`` JSON or CSV), chosen by column names.

The studies write one row per layer / setting / prompt. This module never recomputes anything: it reads
the rows and picks plots from the column names:

- an x column (``layer`` first, then ``step``/``epoch``, then a sweep key such as ``scale``, ``alpha``,
  ``beta``, ``s_par``, ``k``…) and every other numeric column as a metric → one line figure per metric,
  one line per group (the low-cardinality string/bool columns and, for a sweep, the ``layer`` column),
  repeated x within a group averaged with a ±1 std error bar;
- long-format files (``metric`` + ``value`` columns) are pivoted first;
- two or more metrics whose names contain ``err`` also get one shared panel (the compression-error
  panels of the directional study);
- no usable x: bars per group, or nothing but the table.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from geosteer.errors import GeosteerError

X_PRIORITY = ("layer", "step", "epoch", "iteration", "tokens")
SWEEP_KEYS = ("scale", "factor", "alpha", "beta", "gamma", "s_par", "s_perp", "s", "gain", "strength",
              "beta_a", "beta_m", "k", "top_k", "rank", "grid", "grid_size", "lr", "threshold", "temperature",
              "n_parallel", "fraction", "ratio_target", "budget")
ID_LIKE = ("seed", "index", "idx", "id", "prompt_id", "token_index", "head", "dim", "row", "col")
MAX_GROUPS = 12
MAX_FIGURES = 16


@dataclass
class TidyResult:
    """One result file: its ``meta`` dict and ``rows`` (list of flat dicts)."""

    path: Path
    meta: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def columns(self) -> list[str]:
        cols: list[str] = []
        for r in self.rows:
            for k in r:
                if k not in cols:
                    cols.append(k)
        return cols


def _num(v):
    """CSV cells → int/float/bool/None where they look like one."""
    if not isinstance(v, str):
        return v
    s = v.strip()
    if s == "":
        return None
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return v


def load_tidy(path: str | Path) -> TidyResult:
    """Read a tidy ``.json`` (``{"meta", "rows"}`` or a bare list of rows) or ``.csv`` result file."""
    path = Path(path)
    if not path.is_file():
        raise GeosteerError(f"result file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            rows = [{k: _num(v) for k, v in r.items()} for r in csv.DictReader(f)]
        return TidyResult(path, {}, rows)
    if suffix != ".json":
        raise GeosteerError(f"{path}: unsupported result file type '{suffix}' (valid: .json, .csv)")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise GeosteerError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if isinstance(obj, list):
        meta, rows = {}, obj
    elif isinstance(obj, dict) and isinstance(obj.get("rows"), list):
        meta, rows = obj.get("meta") or {}, obj["rows"]
    else:
        raise GeosteerError(f"{path}: not a tidy result file (expected {{\"meta\": ..., \"rows\": [...]}} "
                            "or a list of row objects)")
    if not all(isinstance(r, dict) for r in rows):
        raise GeosteerError(f"{path}: every row must be a JSON object")
    flat = [{k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()} for r in rows]
    return TidyResult(path, meta if isinstance(meta, dict) else {"meta": meta}, flat)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _pivot_long(rows: list[dict]) -> list[dict]:
    """``metric``/``value`` long format → one column per metric (other columns are the keys)."""
    keys = [c for c in rows[0] if c not in ("metric", "value")]
    out: dict[tuple, dict] = {}
    for r in rows:
        key = tuple((k, r.get(k)) for k in keys)
        out.setdefault(key, dict(key))[str(r.get("metric"))] = r.get("value")
    return list(out.values())


def classify_columns(rows: list[dict]) -> tuple[list[str], list[str]]:
    """(numeric columns, categorical columns with 2..MAX_GROUPS distinct values)."""
    cols: list[str] = []
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    numeric, categorical = [], []
    for c in cols:
        vals = [r.get(c) for r in rows if r.get(c) is not None]
        if not vals:
            continue
        if all(_is_num(v) for v in vals):
            if len(set(vals)) > 1:
                numeric.append(c)
        elif 2 <= len({str(v) for v in vals}) <= MAX_GROUPS:
            categorical.append(c)
    return numeric, categorical


def pick_x(numeric: list[str]) -> str | None:
    low = {c.lower(): c for c in numeric}
    for name in X_PRIORITY + SWEEP_KEYS:
        if name in low:
            return low[name]
    return None


def _label(r: dict, group_cols: list[str]) -> str:
    return ", ".join(f"{c}={r.get(c)}" for c in group_cols) if group_cols else "all"


def _series(rows: list[dict], x: str, y: str, group_cols: list[str]) -> dict[str, tuple[list, list, list]]:
    """group label → (xs, mean ys, std ys), x sorted; repeated x in a group are averaged."""
    acc: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if _is_num(r.get(x)) and _is_num(r.get(y)):
            acc[_label(r, group_cols)][r[x]].append(float(r[y]))
    out = {}
    for g, by_x in acc.items():
        xs = sorted(by_x)
        means = [sum(by_x[v]) / len(by_x[v]) for v in xs]
        stds = [math.sqrt(sum((u - m) ** 2 for u in by_x[v]) / len(by_x[v]))
                for v, m in zip(xs, means, strict=True)]
        out[g] = (xs, means, stds)
    return out


def _line_figure(rows, x, y, group_cols, title) -> go.Figure:
    fig = go.Figure()
    for g, (xs, ys, sd) in sorted(_series(rows, x, y, group_cols).items()):
        err = dict(type="data", array=sd, visible=True) if any(s > 0 for s in sd) else None
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=g, error_y=err))
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white", height=380,
                      legend=dict(font=dict(size=10)))
    return fig


def _error_panel(rows, x, metrics, group_cols, title) -> go.Figure:
    cols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=metrics)
    seen = set()
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#393b79", "#637939"]
    for i, m in enumerate(metrics):
        for j, (g, (xs, ys, _)) in enumerate(sorted(_series(rows, x, m, group_cols).items())):
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=g, legendgroup=g,
                                     showlegend=g not in seen, line=dict(color=palette[j % len(palette)])),
                          row=i // cols + 1, col=i % cols + 1)
            seen.add(g)
    fig.update_layout(title=title, template="plotly_white", height=300 * nrows + 80)
    fig.update_xaxes(title_text=x)
    return fig


def auto_figures(result: TidyResult) -> list[go.Figure]:
    """Sensible plots for ``result`` chosen by its column names (see the module docstring)."""
    rows = result.rows
    if not rows:
        return []
    cols = {c for r in rows for c in r}
    if {"metric", "value"} <= cols:
        rows = _pivot_long(rows)
    numeric, categorical = classify_columns(rows)
    x = pick_x(numeric)
    title_base = result.meta.get("title") or result.meta.get("study") or result.name
    figs: list[go.Figure] = []
    if x is None:
        metrics = [c for c in numeric if c.lower() not in ID_LIKE]
        if categorical and metrics:
            g = categorical[0]
            for m in metrics[:MAX_FIGURES]:
                labels = sorted({str(r.get(g)) for r in rows})
                means = []
                for lab in labels:
                    vals = [float(r[m]) for r in rows if str(r.get(g)) == lab and _is_num(r.get(m))]
                    means.append(sum(vals) / len(vals) if vals else None)
                fig = go.Figure(go.Bar(x=labels, y=means))
                fig.update_layout(title=f"{title_base}: {m} by {g}", xaxis_title=g, yaxis_title=m,
                                  template="plotly_white", height=360)
                figs.append(fig)
        return figs
    group_cols = [c for c in categorical if c != x]
    # A sweep over a setting: separate lines per layer (if few layers) rather than averaging them away.
    if x.lower() != "layer":
        for c in numeric:
            if c.lower() == "layer" and len({r.get(c) for r in rows}) <= MAX_GROUPS:
                group_cols.append(c)
    # Other sweep keys with few values also split lines (e.g. s_perp at fixed s_par).
    for c in numeric:
        if c != x and c.lower() in SWEEP_KEYS and len({r.get(c) for r in rows}) <= 6 and c not in group_cols:
            group_cols.append(c)
    metrics = [c for c in numeric if c != x and c not in group_cols and c.lower() not in ID_LIKE]
    err_metrics = [m for m in metrics if "err" in m.lower()]
    if len(err_metrics) >= 2:
        figs.append(_error_panel(rows, x, err_metrics, group_cols, f"{title_base}: errors vs {x}"))
    for m in metrics[:MAX_FIGURES]:
        figs.append(_line_figure(rows, x, m, group_cols, f"{title_base}: {m} vs {x}"))
    return figs


def table_html(result: TidyResult, max_rows: int = 200) -> str:
    """An escaped HTML table of the first ``max_rows`` rows (for reports and studio pages)."""
    from html import escape

    cols = result.columns
    head = "".join(f"<th>{escape(str(c))}</th>" for c in cols)
    body = []
    for r in result.rows[:max_rows]:
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append(f"<td>{escape(f'{v:.5g}' if isinstance(v, float) else str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = len(result.rows) - max_rows
    note = f"<p class='note'>… {more} more rows in the file</p>" if more > 0 else ""
    return f"<table class='tidy'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{note}"
