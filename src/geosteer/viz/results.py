"""Figures from any tidy result file (``{"meta": ..., "rows": [...]}`` JSON or CSV), chosen by column names.

Nothing is recomputed. Tables are split, long formats pivoted, the x axis is a declared axis, ``layer``,
``step`` or a setting, every other numeric column a metric, lines grouped by string columns and small sweeps
(the column rules: docs/studio.md, "Reports and figures"); lm-eval ``results_*.json`` files are read too.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

try:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
except ModuleNotFoundError as _e:  # without the optional extra: one line naming it
    from geosteer.extras import missing

    raise missing(_e) from None

from geosteer.errors import GeosteerError
from geosteer.readers import read_csv_rows, read_json

X_PRIORITY = ("layer", "step", "epoch", "iteration", "tokens")
SWEEP_KEYS = ("scale", "factor", "alpha", "beta", "gamma", "s_par", "s_perp", "s", "gain", "strength",
              "beta_a", "beta_m", "k", "top_k", "rank", "grid", "grid_size", "lr", "threshold", "temperature",
              "n_parallel", "fraction", "ratio_target", "budget")
ID_LIKE = ("seed", "index", "idx", "id", "prompt_id", "token_index", "head", "kv_head", "dim", "row", "col",
           "n", "count")
RUNTIME = {"seconds", "time", "elapsed", "wall_s", "tokens_per_s"}
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
    if not path.exists() and not path.is_symlink():
        raise GeosteerError(f"result file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".csv":  # bounded readers: regular files only, size/nesting/cell caps, one-line errors
        rows = [{k: _num(v) for k, v in r.items()} for r in read_csv_rows(path, what="result file")]
        return TidyResult(path, {}, rows)
    if suffix != ".json":
        raise GeosteerError(f"{path}: unsupported result file type '{suffix}' (valid: .json, .csv)")
    obj = read_json(path, what="result file")
    from geosteer.viz.lm_eval_results import is_lm_eval_results, lm_eval_rows

    if isinstance(obj, list):
        meta, rows = {}, obj
    elif is_lm_eval_results(obj):
        meta, rows = lm_eval_rows(obj)
    elif isinstance(obj, dict) and isinstance(obj.get("rows"), list):
        meta, rows = obj.get("meta") or {}, obj["rows"]
    else:
        raise GeosteerError(f"{path}: not a tidy result file (expected {{\"meta\": ..., \"rows\": [...]}}, "
                            "a list of row objects, or an lm-eval results_*.json)")
    if not all(isinstance(r, dict) for r in rows):
        raise GeosteerError(f"{path}: every row must be a JSON object")
    flat = [{k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()} for r in rows]
    meta = dict(meta) if isinstance(meta, dict) else {"meta": meta}
    for key in ("title", "study"):  # typed: names are text (a number or object becomes its JSON text)
        if meta.get(key) is not None and not isinstance(meta[key], str):
            meta[key] = json.dumps(meta[key])
    return TidyResult(path, meta, flat)


def is_result_file(path: str | Path) -> bool:
    """True when :func:`load_tidy` can read ``path`` (what the studio lists)."""
    try:
        load_tidy(path)
    except (GeosteerError, OSError, UnicodeDecodeError):
        return False
    return True


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _pivot_long(rows: list[dict], value: str) -> list[dict]:
    """``metric`` + ``value``/``mean`` long format → one column per metric; ``std`` → ``<metric>_std``."""
    skip = {"metric", value, "std"}
    keys: list[str] = []
    for r in rows:
        keys.extend(k for k in r if k not in skip and k not in keys)
    out: dict[tuple, dict] = {}
    for r in rows:
        key = tuple((k, r.get(k)) for k in keys if k != "n")
        row = out.setdefault(key, dict(key))
        row[str(r.get("metric"))] = r.get(value)
        if "std" in r:
            row[f"{r.get('metric')}_std"] = r.get("std")
    return list(out.values())


def classify_columns(rows: list[dict]) -> tuple[list[str], list[str]]:
    """(numeric columns incl. booleans as 0/1, categorical string columns with 2..MAX_GROUPS values)."""
    cols: list[str] = []
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    numeric, categorical = [], []
    for c in cols:
        vals = [r.get(c) for r in rows if r.get(c) is not None]
        if not vals:
            continue
        if all(_is_num(v) or isinstance(v, bool) for v in vals):
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


def _f(v) -> float | None:
    if isinstance(v, bool):
        return float(v)
    return float(v) if _is_num(v) else None


def _series(rows: list[dict], x: str, y: str, group_cols: list[str]) -> dict[str, tuple[list, list, list]]:
    """group label → (xs, mean ys, error ys), x sorted. Repeated x in a group are averaged (error = their
    std); a single row per x uses the row's own ``<y>_std`` column if there is one."""
    acc: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    own: dict[str, dict] = defaultdict(dict)
    for r in rows:
        xv, yv = r.get(x), _f(r.get(y))
        if _is_num(xv) and yv is not None:
            g = _label(r, group_cols)
            acc[g][xv].append(yv)
            sd = _f(r.get(f"{y}_std", r.get(f"{y}_stderr")))
            if sd is not None:
                own[g][xv] = sd
    out = {}
    for g, by_x in acc.items():
        xs = sorted(by_x)
        means = [sum(by_x[v]) / len(by_x[v]) for v in xs]
        errs = []
        for v, m in zip(xs, means, strict=True):
            vals = by_x[v]
            if len(vals) > 1:
                errs.append(math.sqrt(sum((u - m) ** 2 for u in vals) / len(vals)))
            else:
                errs.append(own[g].get(v, 0.0))
        out[g] = (xs, means, errs)
    return out


def _wide_positive(series: dict) -> bool:
    """All values > 0 and spanning more than two decades (perplexities under ablation): log axis."""
    ys = [y for _, means, _ in series.values() for y in means]
    return bool(ys) and min(ys) > 0 and max(ys) / min(ys) > 100


def _line_figure(rows, x, y, group_cols, title) -> go.Figure:
    fig = go.Figure()
    series = _series(rows, x, y, group_cols)
    for g, (xs, ys, sd) in sorted(series.items()):
        err = dict(type="data", array=sd, visible=True) if any(s > 0 for s in sd) else None
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=g, error_y=err))
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white", height=380,
                      legend=dict(font=dict(size=10)))
    if _wide_positive(series):
        fig.update_yaxes(type="log")
    _integer_ticks(fig, [v for xs, _, _ in series.values() for v in xs])
    return fig


def _integer_ticks(fig: go.Figure, xs: list) -> None:
    """Whole-number x (layers, steps) gets whole-number ticks, never 8.2, 8.4, ..."""
    if xs and all(isinstance(v, int) and not isinstance(v, bool) for v in xs):
        span = max(xs) - min(xs)
        fig.update_xaxes(tickmode="linear", tick0=min(xs), dtick=max(1, math.ceil(span / 15)))


PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#393b79", "#637939"]


def _panel(rows, x, metrics, group_cols, title) -> go.Figure:
    """Small multiples: one subplot per metric against ``x``, shared legend."""
    cols = min(4 if len(metrics) > 6 else 3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=metrics, vertical_spacing=0.5 / max(nrows, 1))
    seen = set()
    for i, m in enumerate(metrics):
        for j, (g, (xs, ys, sd)) in enumerate(sorted(_series(rows, x, m, group_cols).items())):
            err = dict(type="data", array=sd, visible=True, thickness=1) if any(s > 0 for s in sd) else None
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=g, legendgroup=g, error_y=err,
                                     showlegend=g not in seen, marker=dict(size=4),
                                     line=dict(color=PALETTE[j % len(PALETTE)])),
                          row=i // cols + 1, col=i % cols + 1)
            seen.add(g)
    fig.update_layout(title=title, template="plotly_white", height=240 * nrows + 100,
                      showlegend=bool(group_cols))
    fig.update_xaxes(title_text=x, title_standoff=2)
    _integer_ticks(fig, [r.get(x) for r in rows if _is_num(r.get(x))])
    return fig


def _split(result: TidyResult) -> list[tuple[str, list[dict]]]:
    """Files that hold several tables (a ``table``/``section`` column) → one (suffix, rows) per table."""
    for key in ("table", "section", "kind"):
        vals = [r.get(key) for r in result.rows]
        if all(isinstance(v, str) for v in vals) and 1 < len(set(vals)) <= MAX_GROUPS:
            names = list(dict.fromkeys(vals))
            return [(f" [{key}={n}]", [{k: v for k, v in r.items() if k != key} for r in result.rows
                                      if r.get(key) == n]) for n in names]
    return [("", result.rows)]


def auto_figures(result: TidyResult) -> list[go.Figure]:
    """Sensible plots for ``result`` chosen by its column names (see the module docstring)."""
    figs: list[go.Figure] = []
    base = result.meta.get("title") or result.meta.get("study") or result.name
    declared = result.meta.get("axes")
    axes = tuple(str(a) for a in declared) if isinstance(declared, (list, tuple)) else ()
    for suffix, rows in _split(result):
        figs.extend(_figures_for(rows, f"{base}{suffix}", axes))
    return figs


def _is_axis(col: str, declared: tuple[str, ...]) -> bool:
    return col in declared or col.lower() in SWEEP_KEYS


def _mode(values: list):
    counts: dict = defaultdict(int)
    for v in values:
        counts[v] += 1
    return max(counts, key=lambda v: counts[v])


def one_at_a_time(rows: list[dict], axes: list[str]) -> list[tuple[str, list[dict]]] | None:
    """A sweep that moves one setting at a time (each row has every other setting at its usual value, as
    the s∥ and s⊥ sweeps of ``directional sweep``) → one (axis, rows without the other axes) per axis;
    None for a grid (some row moves two settings at once)."""
    usual = {a: _mode([r.get(a) for r in rows]) for a in axes}
    parts, covered = [], set()
    for a in axes:
        idx = [i for i, r in enumerate(rows) if all(r.get(b) == usual[b] for b in axes if b != a)]
        if len({rows[i].get(a) for i in idx}) >= 2:
            parts.append((a, [{k: v for k, v in rows[i].items() if k == a or k not in axes} for i in idx]))
            covered.update(idx)
    return parts if parts and len(covered) == len(rows) else None


def _is_spread(col: str) -> bool:
    return col.endswith(("_std", "_stderr"))


def _figures_for(rows: list[dict], title_base: str, declared: tuple[str, ...] = ()) -> list[go.Figure]:
    if not rows:
        return []
    cols = {c for r in rows for c in r}
    if "metric" in cols and ({"value", "mean"} & cols):
        rows = _pivot_long(rows, "value" if "value" in cols else "mean")
    numeric, categorical = classify_columns(rows)
    axes = [c for c in numeric if _is_axis(c, declared)]
    if len(axes) >= 2:
        parts = one_at_a_time(rows, axes)
        if parts is not None:
            return [f for a, sub in parts for f in _figures_for(sub, f"{title_base} [{a} sweep]", declared)]
    x = next((c for c in declared if c in numeric), None) or pick_x(numeric)
    if x is None and "value" in numeric and categorical:
        x = "value"  # {"gain": "beta_attn", "value": 0.5, "loss": ...}: the named setting's value is the axis
    figs: list[go.Figure] = []
    skip = set(ID_LIKE) | RUNTIME
    if x is None:
        metrics = [c for c in numeric if c.lower() not in skip and not _is_spread(c)]
        if categorical and metrics:
            g = categorical[0]
            for m in metrics[:MAX_FIGURES]:
                labels = sorted({str(r.get(g)) for r in rows})
                means = []
                for lab in labels:
                    vals = [_f(r.get(m)) for r in rows if str(r.get(g)) == lab and _f(r.get(m)) is not None]
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
    # Other settings of a grid split lines (e.g. s_perp at fixed s_par, k of top-k); a setting is never a
    # metric (with more than MAX_GROUPS values it is left out of the figures).
    for c in numeric:
        if c != x and _is_axis(c, declared) and len({r.get(c) for r in rows}) <= MAX_GROUPS \
                and c not in group_cols:
            group_cols.append(c)
    metrics = [c for c in numeric if c != x and c not in group_cols and c.lower() not in skip
               and not _is_spread(c) and not _is_axis(c, declared)]
    if not metrics:
        return figs
    err_metrics = [m for m in metrics if "err" in m.lower()]
    if len(err_metrics) >= 2:
        figs.append(_panel(rows, x, err_metrics, group_cols, f"{title_base}: errors vs {x}"))
        metrics = [m for m in metrics if m not in err_metrics] + err_metrics
    if len(metrics) > 6:
        figs.append(_panel(rows, x, metrics, group_cols, f"{title_base}: {len(metrics)} metrics vs {x}"))
        return figs
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
