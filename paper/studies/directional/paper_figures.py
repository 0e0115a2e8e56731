"""Study 5: the paper's remaining figures — Fig. 1 (‖Δ∥‖/‖Δ⊥‖ across generation), Fig. 11 (‖Δ‖/‖x‖ per
layer, with App. F's cosine approximation) and Table 11 (layerwise compression-error correlations).

- **Fig. 1**: greedy generation (``measure_generation``, one summary per model call, residual sites only) of
  ``--fig1-prompts`` fixed prompts; for each step and sampled layer the block update's r = ‖Δ∥‖/‖Δ⊥‖ (the
  measurement's ``ratio``). Step 0 is the prompt (mean/std over its positions), step s ≥ 1 the one token
  fed at generation step s. Summary rows: mean and std across prompts per (step, layer).
- **Fig. 11**: ``--prompts`` held-out windows of ``--prompt-len`` tokens (the same windows as Study 2's
  compression runner with the same sizes: taken from the end of the held-out slice), one read-only
  ``DirectionalMeasure`` per window; per layer and site (attn, mlp, block) the token-pooled mean/std of
  ``rel_norm`` = ‖Δ‖/‖x‖ and the std across the windows' means. For the block update also the exact
  cos(x, x + Δ) against App. F's approximation 1 − ½(‖Δ⊥‖/‖x + Δ∥‖)² per token (``cosine_check``).
- **Table 11**: from Study 2's per-layer CSV (``--compression-csv``), per method and site, over layers:
  Pearson r(e, e⊥), Spearman ρ(e, e⊥), ρ(e, e∥) (scipy; e = ``total_err_mean``, e⊥ = ``perp_err_mean``,
  e∥ = ``par_err_mean``), and Perp/Total, Para/Total = the mean over layers of the per-layer ratios
  ``perp_err_mean / total_err_mean`` and ``par_err_mean / total_err_mean`` (the paper does not define them).
  When Study 2's ``compression_summary.json`` lies beside the CSV, its Spearman ρ of each error against PPL
  across the methods (``meta.spearman``, ``meta.spearman_quantisers``) is copied into this file's meta, so one
  file holds both the across-method and the across-layer statistics.

One JSON (meta with the command, and the rows of each part) plus a plotly HTML drawn from that JSON.

    python paper/studies/directional/paper_figures.py --fig1-layers 7,15,22 --fig1-prompts 4 --max-new-tokens 32 \\
        --prompts 12 --prompt-len 256 --out docs/results/directional/paper_figures.json --threads 1
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer_paper.scripts import command_line, run_script

SITES = ("attn", "mlp", "block")
FIG1_PROMPTS = (
    "The capital of France is",
    "In 1905, Albert Einstein published",
    "A simple recipe for bread needs",
    "Photosynthesis is the process by which",
)
# paper Table 11 (Qwen3-4B, attention output): our nearest method, r(e,e⊥), ρ(e,e⊥), ρ(e,e∥), Perp/Total, Para/Total
PAPER_TABLE11 = {
    "Quantization": ("awq4", 0.998, 0.990, 0.596, 0.980, 0.168),
    "Unstructured": ("wanda50", 0.970, 0.909, 0.810, 0.891, 0.439),
    "4:8": ("wanda4:8", 0.986, 0.986, -0.135, 0.887, 0.415),
    "2:4": ("wanda2:4", 0.991, 0.979, -0.432, 0.875, 0.425),
}
_CSV_COLS = ("method", "layer", "site", "perp_err_mean", "par_err_mean", "total_err_mean")


def _f(x) -> float | None:
    """A JSON-safe float (NaN/inf → None)."""
    x = float(x)
    return x if math.isfinite(x) else None


def _mean_std(xs: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and population std of the finite values of ``xs`` (None, None if there are none)."""
    v = [float(x) for x in xs if x is not None and math.isfinite(float(x))]
    if not v:
        return None, None
    m = sum(v) / len(v)
    return m, math.sqrt(max(sum((x - m) ** 2 for x in v) / len(v), 0.0))


def cosine_check(x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per token (last dim = features): the exact cos(x, y) and App. F's approximation of it for the update
    Δ = y − x: 1 − ½ t² with t = ‖Δ⊥‖ / ‖x + Δ∥‖ (Δ∥ = αx, α = Δ·x/‖x‖²); in float64. Exactly,
    cos = sign(1 + α) / √(1 + t²), so the approximation needs t small (and 1 + α > 0), not ‖Δ‖ ≪ ‖x‖ as such."""
    from geosteer.directional.decompose import decompose

    x, y = x.double(), y.double()
    _, par, perp = decompose(y - x, x)
    t = perp.norm(dim=-1) / (x + par).norm(dim=-1).clamp_min(1e-300)
    exact = (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1)).clamp_min(1e-300)
    return {"exact": exact, "approx": 1.0 - 0.5 * t * t, "t": t}


# -- Fig. 1 ---------------------------------------------------------------------------------------------
def fig1_rows(model, tok, prompts: Sequence[str], layers: Sequence[int], max_new_tokens: int,
              log=print) -> tuple[list[dict], list[dict], list[dict]]:
    """Per-prompt rows (prompt, step, layer: block ratio mean/std/n, alpha mean), summary rows per (step,
    layer) across prompts, and the prompts with their greedy continuations."""
    from geosteer.directional.measure import measure_generation

    per, gens = [], []
    for i, p in enumerate(prompts):
        rows, info = measure_generation(model, tok, p, max_new_tokens=max_new_tokens, layers=list(layers),
                                        value=False)
        gens.append({"prompt": i, "text": p, "generated": info["generated"], "steps": info["steps"]})
        per += [{"prompt": i, "step": r["step"], "layer": r["layer"], "n_tokens": r["n_tokens"],
                 "ratio_mean": _f(r["ratio_mean"]), "ratio_std": _f(r["ratio_std"]), "ratio_n": r["ratio_n"],
                 "alpha_mean": _f(r["alpha_mean"])} for r in rows if r["site"] == "block"]
        log(f"fig1 prompt {i}: {info['steps']} model calls, {info['generated']!r}")
    summary = []
    for step in sorted({r["step"] for r in per}):
        for layer in layers:
            sel = [r["ratio_mean"] for r in per if r["step"] == step and r["layer"] == layer]
            m, s = _mean_std(sel)
            summary.append({"step": step, "layer": layer, "ratio_mean": m, "ratio_std_prompts": s,
                            "n_prompts": len(sel)})
    return per, summary, gens


def fig1_layer_summary(per: Sequence[dict], layers: Sequence[int]) -> list[dict]:
    """Per layer: the ratio over all generated tokens (steps ≥ 1, every prompt), the share of those tokens
    whose parallel part points along x (α > 0), and the mean of the prompt steps' position means (step 0)."""
    out = []
    for layer in layers:
        gen = [r["ratio_mean"] for r in per if r["layer"] == layer and r["step"] >= 1 and r["ratio_mean"] is not None]
        alpha = [r["alpha_mean"] for r in per if r["layer"] == layer and r["step"] >= 1 and r["alpha_mean"] is not None]
        pro = [r["ratio_mean"] for r in per if r["layer"] == layer and r["step"] == 0]
        gm, gs = _mean_std(gen)
        out.append({"layer": layer, "generated_ratio_mean": gm, "generated_ratio_std": gs,
                    "generated_ratio_min": min(gen) if gen else None, "generated_ratio_max": max(gen) if gen else None,
                    "n_generated": len(gen), "frac_alpha_positive": sum(x > 0 for x in alpha) / len(alpha) if alpha
                    else None, "prompt_ratio_mean": _mean_std(pro)[0]})
    return out


# -- Fig. 11 --------------------------------------------------------------------------------------------
@torch.no_grad()
def fig11_rows(model, windows: Sequence[torch.Tensor]) -> tuple[list[dict], list[dict]]:
    """Per-window rows (window, layer, site: rel_norm mean/std/n; block: cosine-check stats) and per-layer
    summary rows: token-pooled mean/std of rel_norm per site, the std across window means, and for the block
    update ‖Δ‖/‖x‖ at each window's first position (where an attention sink forms) and over the rest, and the
    exact-vs-approximate cosine (means, max |error| over all and over non-first positions, the fraction of
    tokens off by more than 0.01, max t, tokens with cos ≤ 0)."""
    from geosteer.directional.measure import DirectionalMeasure
    from geosteer.interventions import HookIntervention, steer
    from geosteer.models.loading import input_device

    device = input_device(model)
    per: list[dict] = []
    for w, ids in enumerate(windows):
        cos: dict[int, dict] = {}

        def fn(y, ctx, cos=cos):
            x = ctx.state["resid_pre"][0]
            c = cosine_check(x, y[0])
            err = (c["exact"] - c["approx"]).abs()
            cos[ctx.layer] = {
                "rel_norm_first": ((y[0, 0] - x[0]).double().norm() / x[0].double().norm()).item(),
                "cos_exact_mean": c["exact"].mean().item(), "cos_approx_mean": c["approx"].mean().item(),
                "cos_abs_err_max": err.max().item(), "cos_abs_err_mean": err.mean().item(),
                "cos_abs_err_max_rest": err[1:].max().item() if len(err) > 1 else None,
                "n_cos_err_gt_0.01": int((err > 0.01).sum()), "t_max": c["t"].max().item(),
                "n_cos_negative": int((c["exact"] <= 0).sum())}

        meas = DirectionalMeasure(value=False)
        with steer(model, meas, HookIntervention("resid_post", fn)):
            model(input_ids=ids.reshape(1, -1).to(device), use_cache=False)
        for r in meas.rows():
            row = {"window": w, "layer": r["layer"], "site": r["site"], "n_tokens": r["n_tokens"],
                   "rel_norm_mean": r["rel_norm_mean"], "rel_norm_std": r["rel_norm_std"],
                   "rel_norm_max": r["rel_norm_max"]}
            if r["site"] == "block":
                row.update(cos[r["layer"]])
            per.append(row)
    return per, fig11_summary(per)


def fig11_summary(per: Sequence[dict]) -> list[dict]:
    """Pool the per-window rows: mean = Σ nᵢmᵢ/N, token std from Σ nᵢ(sᵢ² + mᵢ²)/N − mean² (exact for
    population stds), window std = std of the window means."""
    out = []
    for layer in sorted({r["layer"] for r in per}):
        for site in SITES:
            rs = [r for r in per if r["layer"] == layer and r["site"] == site]
            if not rs:
                continue
            n = sum(r["n_tokens"] for r in rs)
            mean = sum(r["n_tokens"] * r["rel_norm_mean"] for r in rs) / n
            ex2 = sum(r["n_tokens"] * (r["rel_norm_std"] ** 2 + r["rel_norm_mean"] ** 2) for r in rs) / n
            row = {"layer": layer, "site": site, "n_tokens": n, "n_windows": len(rs), "rel_norm_mean": mean,
                   "rel_norm_std_tokens": math.sqrt(max(ex2 - mean * mean, 0.0)),
                   "rel_norm_std_windows": _mean_std([r["rel_norm_mean"] for r in rs])[1],
                   "rel_norm_max": max(r["rel_norm_max"] for r in rs)}
            if site == "block":
                first = [r["rel_norm_first"] for r in rs]
                rest = [r["cos_abs_err_max_rest"] for r in rs if r["cos_abs_err_max_rest"] is not None]
                row.update({
                    "rel_norm_first_mean": sum(first) / len(rs),
                    "rel_norm_mean_rest": (n * mean - sum(first)) / (n - len(rs)) if n > len(rs) else None,
                    "cos_exact_mean": sum(r["n_tokens"] * r["cos_exact_mean"] for r in rs) / n,
                    "cos_approx_mean": sum(r["n_tokens"] * r["cos_approx_mean"] for r in rs) / n,
                    "cos_abs_err_max": max(r["cos_abs_err_max"] for r in rs),
                    "cos_abs_err_mean": sum(r["n_tokens"] * r["cos_abs_err_mean"] for r in rs) / n,
                    "cos_abs_err_max_rest": max(rest) if rest else None,
                    "frac_cos_err_gt_0.01": sum(r["n_cos_err_gt_0.01"] for r in rs) / n,
                    "t_max": max(r["t_max"] for r in rs),
                    "n_cos_negative": sum(r["n_cos_negative"] for r in rs)})
            out.append(row)
    return out


# -- Table 11 -------------------------------------------------------------------------------------------
def read_layer_csv(path: Path) -> list[dict]:
    """Study 2's per-layer rows (``compression_layers.csv``), numbers parsed; one-line errors."""
    if not Path(path).is_file():
        raise GeosteerError(f"compression CSV not found: {path} (written by paper/studies/directional/compression.py)")
    with open(path, newline="", encoding="utf-8") as f:
        rd = csv.DictReader(f)
        missing = [c for c in _CSV_COLS if c not in (rd.fieldnames or [])]
        if missing:
            raise GeosteerError(f"{path} lacks the column(s) {', '.join(missing)}")
        try:
            return [{"method": r["method"], "site": r["site"], "layer": int(r["layer"]),
                     **{c: float(r[c]) for c in _CSV_COLS[3:]}} for r in rd]
        except ValueError as e:
            raise GeosteerError(f"{path}: a number does not parse ({e})") from None


def table11_rows(rows: Sequence[dict], sites: Sequence[str] = SITES) -> list[dict]:
    """Per method and site, over its layers: Pearson r(e, e⊥), Spearman ρ(e, e⊥), ρ(e, e∥), Perp/Total and
    Para/Total (means over layers of the per-layer ratios of the layer-mean errors)."""
    from scipy.stats import pearsonr, spearmanr

    bad = [s for s in sites if s not in SITES]
    if bad:
        raise GeosteerError(f"unknown site '{bad[0]}'; valid: {', '.join(SITES)}")
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        for site in sites:
            rs = sorted((r for r in rows if r["method"] == method and r["site"] == site), key=lambda r: r["layer"])
            if len(rs) < 3:
                raise GeosteerError(f"method '{method}' site '{site}' has {len(rs)} layer rows; need >= 3")
            e, ep, ea = ([r[k] for r in rs] for k in ("total_err_mean", "perp_err_mean", "par_err_mean"))
            out.append({"method": method, "site": site, "n_layers": len(rs),
                        "pearson_e_perp": _f(pearsonr(e, ep)[0]), "spearman_e_perp": _f(spearmanr(e, ep)[0]),
                        "spearman_e_par": _f(spearmanr(e, ea)[0]),
                        "perp_over_total": sum(p / t for p, t in zip(ep, e, strict=True)) / len(rs),
                        "par_over_total": sum(p / t for p, t in zip(ea, e, strict=True)) / len(rs)})
    return out


def summary_spearman(csv_path: Path) -> dict:
    """The across-method Spearman rows of the ``compression_summary.json`` beside Study 2's CSV (empty when
    there is none, or it holds none)."""
    from geosteer.readers import read_json

    path = Path(csv_path).with_name("compression_summary.json")
    if not path.is_file():
        return {}
    doc = read_json(path, what="compression summary")  # a malformed file: one line (ReadRefused)
    meta = doc.get("meta") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        raise GeosteerError(f"compression summary {path} has no meta object")
    return {k: meta[k] for k in ("spearman", "spearman_quantisers") if isinstance(meta.get(k), list)}


def paper_table11() -> list[dict]:
    """The paper's Table 11 rows with the method of ours we set beside each."""
    keys = ("pearson_e_perp", "spearman_e_perp", "spearman_e_par", "perp_over_total", "par_over_total")
    return [{"setting": k, "ours": v[0], **dict(zip(keys, v[1:], strict=True))} for k, v in PAPER_TABLE11.items()]


# -- figure and runner ----------------------------------------------------------------------------------
def figure(doc: dict):
    """Plotly figure from the result JSON: Fig. 1 (ratio vs step per layer, mean ± std across prompts) and
    Fig. 11 (‖Δ‖/‖x‖ per layer and site, mean ± std across windows)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("Fig. 1: ‖Δ∥‖/‖Δ⊥‖ of the block update per step",
                                                        "Fig. 11: ‖Δ‖/‖x‖ per layer"))
    colours = ("31,119,180", "255,127,14", "44,160,44", "148,103,189", "140,86,75", "214,39,40")

    def band(x, m, s, name, c, col):
        hi = [a + b for a, b in zip(m, s, strict=True)]
        lo = [max(a - b, 1e-3) for a, b in zip(m, s, strict=True)]  # stays positive on the log axis
        fig.add_trace(go.Scatter(x=x + x[::-1], y=hi + lo[::-1], fill="toself", line=dict(width=0),
                                 fillcolor=f"rgba({c},0.2)", hoverinfo="skip", showlegend=False), row=1, col=col)
        fig.add_trace(go.Scatter(x=x, y=m, mode="lines+markers", line=dict(color=f"rgb({c})"), name=name),
                      row=1, col=col)

    f1 = [r for r in doc.get("fig1", []) if r["ratio_mean"] is not None]
    for i, layer in enumerate(sorted({r["layer"] for r in f1})):
        rs = sorted((r for r in f1 if r["layer"] == layer), key=lambda r: r["step"])
        band([r["step"] for r in rs], [r["ratio_mean"] for r in rs], [r["ratio_std_prompts"] or 0.0 for r in rs],
             f"layer {layer}", colours[i % 3], 1)
    f11 = doc.get("fig11", [])
    for i, site in enumerate(SITES):
        rs = sorted((r for r in f11 if r["site"] == site), key=lambda r: r["layer"])
        if rs:
            band([r["layer"] for r in rs], [r["rel_norm_mean"] for r in rs],
                 [r["rel_norm_std_windows"] or 0.0 for r in rs], f"{site} ‖Δ‖/‖x‖", colours[3 + i], 2)
    fig.update_xaxes(title_text="generation step (0 = prompt)", row=1, col=1)
    fig.update_xaxes(title_text="layer", row=1, col=2)
    fig.update_yaxes(type="log", title_text="‖Δ‖/‖x‖ (log), band ± std across windows", row=1, col=2)
    fig.update_layout(title=f"paper figures on {doc.get('meta', {}).get('model', '')}", height=440, width=1100)
    return fig


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python paper/studies/directional/paper_figures.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--model", "-m", default="smollm2")
    ap.add_argument("--parts", default="fig1,fig11,table11", help="any of fig1, fig11, table11")
    ap.add_argument("--fig1-layers", default="7,15,22", help="the sampled layers of Fig. 1")
    ap.add_argument("--fig1-prompts", type=int, default=4, help=f"how many of the {len(FIG1_PROMPTS)} fixed prompts")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=12, help="held-out windows for Fig. 11")
    ap.add_argument("--prompt-len", type=int, default=256, help="tokens per held-out window")
    ap.add_argument("--compression-csv", type=Path, default=Path("docs/results/directional/compression_layers.csv"))
    ap.add_argument("--sites", default="attn,mlp,block", help="Table 11 sites")
    ap.add_argument("--out", type=Path, default=Path("docs/results/directional/paper_figures.json"))
    ap.add_argument("--threads", type=int, default=None)
    return ap


def run(a: argparse.Namespace, argv: Sequence[str] | None) -> None:
    from geosteer.io_utils import atomic_write_json, atomic_write_text

    parts = [p.strip() for p in a.parts.split(",") if p.strip()]
    bad = [p for p in parts if p not in ("fig1", "fig11", "table11")] or ([] if parts else ["(empty)"])
    if bad:
        raise GeosteerError(f"unknown part '{bad[0]}'; valid: fig1, fig11, table11")
    if not 1 <= a.fig1_prompts <= len(FIG1_PROMPTS):
        raise GeosteerError(f"--fig1-prompts must be in 1..{len(FIG1_PROMPTS)} (got {a.fig1_prompts})")
    for name in ("max_new_tokens", "prompts", "prompt_len"):
        if getattr(a, name) < 1:
            raise GeosteerError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(a, name)})")
    doc: dict = {"meta": {"command": command_line("directional/paper_figures.py", argv), "parts": parts}}
    if "table11" in parts:  # no model needed; checked first so a bad CSV or site fails before any loading
        sites = [s.strip() for s in a.sites.split(",") if s.strip()]
        doc["table11"] = table11_rows(read_layer_csv(a.compression_csv), sites)
        doc["table11_paper"] = paper_table11()
        doc["meta"]["table11"] = {"csv": str(a.compression_csv), "perp_over_total": "mean over layers of "
                                  "perp_err_mean/total_err_mean (per-layer means of Study 2's CSV)"}
        doc["meta"].update(summary_spearman(a.compression_csv))
    if {"fig1", "fig11"} & set(parts):
        from geosteer.models.anatomy import anatomy, parse_layers
        from geosteer.models.loading import load_model, model_id

        if a.threads:
            torch.set_num_threads(a.threads)
        m, tok = load_model(a.model)
        layers = parse_layers(a.fig1_layers, anatomy(m).n_layers) or list(range(anatomy(m).n_layers))
        doc["meta"]["model"] = model_id(m)
        if "fig1" in parts:
            t0 = time.time()
            per, summ, gens = fig1_rows(m, tok, FIG1_PROMPTS[:a.fig1_prompts], layers, a.max_new_tokens)
            doc["fig1"], doc["fig1_prompts"] = summ, per
            doc["fig1_layers"], doc["meta"]["fig1"] = fig1_layer_summary(per, layers), {
                "layers": layers, "max_new_tokens": a.max_new_tokens, "prompts": gens,
                "seconds": round(time.time() - t0, 1)}
        if "fig11" in parts:
            from geosteer.eval.perplexity import heldout_ids

            t0, n = time.time(), a.prompt_len
            held = heldout_ids(tok, (a.prompts + 8) * n)  # Study 2's slice for the same sizes
            if len(held) < a.prompts * n:
                raise GeosteerError(f"the held-out slice has {len(held)} tokens; need {a.prompts * n}")
            windows = [held[len(held) - (i + 1) * n: len(held) - i * n] for i in range(a.prompts)]
            doc["fig11_windows"], doc["fig11"] = fig11_rows(m, windows)
            doc["meta"]["fig11"] = {"windows": a.prompts, "window_len": n, "held_tokens": int(len(held)),
                                    "seconds": round(time.time() - t0, 1)}
    atomic_write_json(a.out, doc)
    if {"fig1", "fig11"} & set(parts):
        atomic_write_text(a.out.with_suffix(".html"), figure(doc).to_html(include_plotlyjs="cdn", full_html=True))
    print(f"wrote {a.out}")


def main(argv: Sequence[str] | None = None) -> None:
    run_script(parser(), run, argv)


if __name__ == "__main__":
    main()
