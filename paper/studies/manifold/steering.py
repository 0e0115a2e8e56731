"""The attention-manifold output studies (paper §4–5): stock vs surfaces, edits of the surfaces, walls.

- ``compare``: stock vs surfaces on a prompt set (default ``manifold_prompts``); greedy change rate and mean
  next-token KL(P_stock ‖ P_surfaces) per category (paper Table 6), with side-by-side texts. Resumable: the
  rows are kept in ``<out>.partial`` after each block of 10 prompts, and a rerun of the same command skips them.
- ``steer``: edits of the trained bank against the unedited bank (paper Table 2) on ``steering_prompts``:
  the most sensitive layer (zeroing each layer's surfaces, ``manifold.explore.layer_sensitivity``) is
  inverted layer-wide, at its largest-norm surface, on the query-side rows / key-side columns of that
  surface and of the layer; then the four walls of ``walls`` on the wall prompts.
- ``walls``: the paper's Table 3 walls on ``wall_prompts`` (unsafe vs safe): layer-wide and top-N norm,
  each as the legacy grid-wall (C = −1, so 1 + S = 0 only inside the grid) and as an exact wall (gain 0
  for every pair), with each wall's leakage (region attention mass that still passes value).

Every edit is an ``Edit`` of ``geosteer.manifold.edit`` applied with ``live`` (the coefficients, walls and
history come back after each condition; the artifact is never modified); every comparison is
``geosteer.eval.compare.PairedComparison`` (the unedited state computed once per prompt): greedy change,
first divergence, next-token KL and, in ``steer``, paired-seed sampling (T = 0.8, top-k 50). Rows go to the
JSON result (with the command in ``meta``), per-condition summaries to a ``.summary.csv`` beside it.

    python paper/studies/manifold/steering.py compare --surfaces artifacts/smollm2-surfaces --threads 1 \\
        --out docs/results/manifold_compare.json
    python paper/studies/manifold/steering.py steer --surfaces artifacts/smollm2-surfaces --threads 1 \\
        --out docs/results/manifold_steering.json
    python paper/studies/manifold/steering.py walls --surfaces artifacts/smollm2-surfaces --layer 10 --threads 1 \\
        --out docs/results/manifold_walls.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.eval.compare import PairedComparison, summarize_by
from geosteer.eval.prompts import Prompt
from geosteer.manifold.coverage import legacy_walls, wall_leakage
from geosteer.manifold.edit import Edit, grid_wall, live, wall
from geosteer.manifold.explore import layer_norms, layer_sensitivity, top_surfaces
from geosteer_paper.scripts import command_line, run_script

Log = Callable[[str], None]
KL_EDIT = "KL(P_unedited || P_edited) of the next token after the prompt, nats"


def inversions(layer: int, head: int, dim: int, K: int) -> list[tuple[str, Edit, bool]]:
    """(condition, edit, paired sampling?) of the steering study: layer-wide and single-surface inversion,
    then the upper/lower half of the surface's control rows (query side) or columns (key side) and of the
    layer's."""
    mid = K // 2  # row/column 5 for K = 11 (basis centred at 0 on a symmetric range)
    hi, lo = list(range(mid, K)), list(range(mid))
    surf = {"layers": [layer], "heads": [head], "dims": [dim]}
    name = f"invert surface L{layer} h{head} d{dim}"
    return [(f"invert layer {layer}", Edit("invert", layers=[layer]), True),
            (name, Edit("invert", **surf), True),
            (f"{name} rows {mid}-{K - 1}", Edit("invert", **surf, rows=hi), False),
            (f"{name} rows 0-{mid - 1}", Edit("invert", **surf, rows=lo), False),
            (f"{name} cols {mid}-{K - 1}", Edit("invert", **surf, cols=hi), False),
            (f"invert layer {layer} rows {mid}-{K - 1}", Edit("invert", layers=[layer], rows=hi), False),
            (f"invert layer {layer} cols {mid}-{K - 1}", Edit("invert", layers=[layer], cols=hi), False)]


def wall_edits(layer: int, top: int) -> list[tuple[str, Edit]]:
    """The paper's Table 3 walls (layer-wide, top-``top`` norm surfaces) as grid-walls and exact walls."""
    return [(f"grid-wall layer {layer}", grid_wall(layers=[layer])),
            (f"grid-wall top-{top} surfaces of layer {layer}", grid_wall(layers=[layer], top=top)),
            (f"exact wall layer {layer}", wall(layers=[layer])),
            (f"exact wall top-{top} surfaces of layer {layer}", wall(layers=[layer], top=top))]


def run_edits(cmp: PairedComparison, bank, edits: Sequence[tuple], log: Log, t0: float, *,
              sample: bool = True, leakage: list | None = None) -> list[dict]:
    """Rows of ``cmp.run([bank])`` under each (condition, edit[, sample]) applied live; with ``leakage``
    (a list), each wall's ``wall_leakage`` on the same prompts is appended to it."""
    rows = []
    for name, edit, *flag in edits:
        with live(bank, edit):
            got = [{"condition": name, **r} for r in cmp.run([bank], sample=flag[0] if flag else sample)]
            if leakage is not None:
                lk = wall_leakage(cmp.model, cmp.tok, bank, [p.text for p in cmp.prompts])
                leakage += [{"condition": name, **r} for r in lk]
        rows += got
        log(f"{name}: {sum(r['greedy_changed'] for r in got)}/{len(got)} greedy changed "
            f"({time.perf_counter() - t0:.0f} s)")
    return rows


def summarize_conditions(rows: list[dict]) -> list[dict]:
    """Per condition (walls: per prompt category too): prompts, greedy changes, mean KL, paired sampling."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        key = (r["condition"], r["category"] if "wall" in r["condition"] else "all")
        groups.setdefault(key, []).append(r)
    out = []
    for (cond, cat), rs in groups.items():
        s = {"condition": cond, "prompts_group": cat, "prompts": len(rs),
             "greedy_changed": sum(r["greedy_changed"] for r in rs), "mean_kl": sum(r["kl"] for r in rs) / len(rs)}
        if "sampled_changed" in rs[0]:
            s["sampled_changed_frac"] = sum(r["sampled_changed"] for r in rs) / sum(r["sample_seeds"] for r in rs)
            s["sampled_changed_min_max"] = [min(r["sampled_changed"] for r in rs),
                                            max(r["sampled_changed"] for r in rs)]
        out.append(s)
    return out


def sensitivity(model, tok, bank, texts: Sequence[str]) -> list[dict]:
    """``explore.layer_sensitivity`` rows in bank order, each with its layer's ‖C‖_F (``layer_norm``)."""
    norms = {r["layer"]: r["norm"] for r in layer_norms(bank)}
    rows = layer_sensitivity(model, tok, bank, texts)
    rows.sort(key=lambda r: bank.slot(r["layer"]))
    return [{**r, "layer_norm": norms[r["layer"]]} for r in rows]


def output_comparison(model, tok, bank, prompts: Sequence[Prompt], max_new_tokens: int = 30,
                      log: Log | None = None, *, done: Sequence[dict] = (),
                      on_block: Callable[[list[dict]], None] | None = None) -> tuple[list[dict], list[dict]]:
    """Stock (a) vs ``bank`` (b) per prompt; returns (rows, per-category summary incl. an 'all' row).
    ``done``: the rows of the first prompts from an earlier, stopped run (kept, not recomputed);
    ``on_block``: called with the rows so far after each block of 10 prompts."""
    rows: list[dict] = list(done)
    for i in range(len(rows), len(prompts), 10):  # in blocks of 10, to report progress
        rows += PairedComparison(model, tok, prompts[i:i + 10], (), max_new_tokens=max_new_tokens).run([bank])
        if on_block:
            on_block(rows)
        if log:
            log(f"compare: {len(rows)}/{len(prompts)}")
    return rows, summarize_by(rows, "category")


def compare_partial(path: str | Path, key: dict, prompts: Sequence[Prompt]) -> list[dict]:
    """The rows a stopped ``compare`` run kept in ``path`` (none if there is no such file); refused when
    they were computed with other settings or on other prompts."""
    path = Path(path)
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    rows = doc.get("rows", [])
    if doc.get("key") != key or [r["prompt"] for r in rows] != [p.text for p in prompts[:len(rows)]]:
        raise GeosteerError(f"{path} holds a stopped compare run with other settings; delete it to start over")
    return rows


def wall_study(model, tok, bank, wall_prompts: Sequence[Prompt], layer: int, *, top_walls: int = 10,
               max_new_tokens: int = 30, log: Log | None = print) -> dict:
    """The four walls on ``layer`` (greedy change and next-token KL per unsafe/safe group) and each wall's
    leakage on the same prompts."""
    if bank.walls or legacy_walls(bank):
        raise GeosteerError("the bank already carries walls; the walls study wants the trained surfaces alone")
    t0 = time.perf_counter()
    top = top_surfaces(bank, top_walls, layers=[layer])
    cmp = PairedComparison(model, tok, wall_prompts, [bank], max_new_tokens=max_new_tokens)
    leak: list[dict] = []
    rows = run_edits(cmp, bank, wall_edits(layer, len(top)), log or (lambda s: None), t0, sample=False,
                     leakage=leak)
    return {"layer": layer, "top_surfaces": top, "rows": rows, "summary": summarize_conditions(rows),
            "leakage": leak, "wall_baseline": cmp.baseline_rows(), "seconds": time.perf_counter() - t0}


def steering_study(model, tok, bank, prompts: Sequence[Prompt], wall_prompts: Sequence[Prompt], *,
                   seeds: Sequence[int] = tuple(range(10)), max_new_tokens: int = 30, top_walls: int = 10,
                   layer: int | None = None, log: Log | None = print) -> dict:
    """The inversions (module docstring) on ``prompts`` and the walls on ``wall_prompts``; tidy parts."""
    say = log or (lambda s: None)
    t0 = time.perf_counter()
    sens = sensitivity(model, tok, bank, [p.text for p in prompts])
    if layer is None:
        layer = max(sens, key=lambda r: r["mean_kl"])["layer"]
    top = top_surfaces(bank, top_walls, layers=[layer])
    h0, d0 = top[0]["head"], top[0]["dim"]
    say(f"most sensitive layer: {layer}; top surface there: head {h0} dim {d0} (norm {top[0]['norm']:.3f})")
    cmp = PairedComparison(model, tok, prompts, [bank], max_new_tokens=max_new_tokens, seeds=seeds)
    rows = run_edits(cmp, bank, inversions(layer, h0, d0, bank.K), say, t0)
    wcmp = PairedComparison(model, tok, wall_prompts, [bank], max_new_tokens=max_new_tokens)
    rows += run_edits(wcmp, bank, wall_edits(layer, len(top)), say, t0, sample=False)
    return {"layer": layer, "sensitivity": sens, "top_surfaces": top, "rows": rows,
            "summary": summarize_conditions(rows), "baseline": cmp.baseline_rows(),
            "wall_baseline": wcmp.baseline_rows(), "seconds": time.perf_counter() - t0}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python paper/studies/manifold/steering.py", description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=["compare", "steer", "walls"])
    ap.add_argument("--surfaces", required=True, help="surfaces artifact folder")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", default=None, help="prompt set (default: manifold_ / steering_prompts)")
    ap.add_argument("--wall-prompts", default="wall_prompts")
    ap.add_argument("--limit", type=int, default=None, help="only the first N prompts (quick runs)")
    ap.add_argument("--max-new-tokens", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=10, help="paired sampling seeds 0..N-1 (steer)")
    ap.add_argument("--layer", type=int, default=None, help="edit this layer (steer default: most sensitive)")
    ap.add_argument("--top-walls", type=int, default=10, help="surfaces of the top-N walls (>= 1)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", required=True, help="result JSON (a CSV summary is written beside it; compare keeps "
                    "its rows in <out>.partial after each block of 10 prompts, and a rerun with the same settings "
                    "resumes from them)")
    return ap


def run(a: argparse.Namespace, argv: Sequence[str] | None) -> None:
    from geosteer import load_model
    from geosteer.eval.prompts import load_prompts
    from geosteer.io_utils import atomic_write_csv, atomic_write_json, write_records
    from geosteer.manifold import load

    if a.study == "walls" and a.layer is None:
        raise GeosteerError("the walls study needs --layer (e.g. the steer study's most sensitive layer)")
    if a.top_walls < 1:
        raise GeosteerError(f"--top-walls must be >= 1 (got {a.top_walls})")
    out = Path(a.out)
    partial, key, done = out.with_name(out.name + ".partial"), {}, []
    if a.study == "compare":
        prompts = load_prompts(a.prompts or "manifold_prompts")[: a.limit]
        key = {"model": a.model, "surfaces": a.surfaces, "prompt_set": a.prompts or "manifold_prompts",
               "max_new_tokens": a.max_new_tokens}
        done = compare_partial(partial, key, prompts)
    if a.threads:
        torch.set_num_threads(a.threads)
    model, tok = load_model(a.model)
    bank = load(a.surfaces, model=model)
    meta = {"command": command_line("manifold/steering.py", argv),
            "model": a.model, "surfaces": a.surfaces, "max_new_tokens": a.max_new_tokens, "greedy": True,
            "threads": torch.get_num_threads(), "torch": torch.__version__}
    log = lambda s: print(s, flush=True)  # noqa: E731
    if a.study == "compare":
        t0 = time.perf_counter()
        keep = lambda rs: atomic_write_json(partial, {"key": key, "rows": rs})  # noqa: E731
        if done:
            log(f"compare: resumed with {len(done)}/{len(prompts)} prompts from {partial}")
        rows, summary = output_comparison(model, tok, bank, prompts, a.max_new_tokens, log=log, done=done,
                                          on_block=keep)
        meta.update(prompt_set=key["prompt_set"], seconds=round(time.perf_counter() - t0, 1),
                    resumed_prompts=len(done),
                    summary=summary, states={"a": "stock model", "b": "surfaces"},
                    kl="KL(P_stock || P_surfaces) of the next token after the prompt, nats")
        for r in summary:
            log(f"{r['category']:>14}: {r['greedy_change_rate']:.2f} changed, mean KL {r['mean_kl']:.4f}")
    elif a.study == "walls":
        walls = load_prompts(a.wall_prompts)[: a.limit]
        res = wall_study(model, tok, bank, walls, a.layer, top_walls=a.top_walls, max_new_tokens=a.max_new_tokens,
                         log=log)
        meta.update(wall_prompt_set=a.wall_prompts, layer=a.layer, top_surfaces=res["top_surfaces"],
                    leakage=res["leakage"], wall_baseline=res["wall_baseline"])
    else:
        prompts = load_prompts(a.prompts or "steering_prompts")[: a.limit]
        walls = load_prompts(a.wall_prompts)[: a.limit]
        res = steering_study(model, tok, bank, prompts, walls, seeds=tuple(range(a.seeds)),
                             max_new_tokens=a.max_new_tokens, top_walls=a.top_walls, layer=a.layer, log=log)
        meta.update(prompt_set=a.prompts or "steering_prompts", wall_prompt_set=a.wall_prompts,
                    seeds=list(range(a.seeds)), temperature=0.8, top_k=50, layer=res["layer"],
                    sensitivity=res["sensitivity"], top_surfaces=res["top_surfaces"], baseline=res["baseline"],
                    wall_baseline=res["wall_baseline"])
    if a.study != "compare":
        rows, summary = res["rows"], res["summary"]
        meta.update(summary=summary, seconds=round(res["seconds"], 1), states={"a": "unedited surfaces",
                                                                              "b": "edited surfaces"}, kl=KL_EDIT)
        for r in summary + res.get("leakage", []):
            log(str(r))
    write_records(out, rows, meta)
    atomic_write_csv(out.with_suffix(".summary.csv"), summary)
    partial.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> None:
    run_script(parser(), run, argv)


if __name__ == "__main__":
    main()
