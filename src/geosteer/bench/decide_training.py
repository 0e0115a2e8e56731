"""How the learned levers were trained, shown: per unit, per lever, and step by step.

Each learned lever's unit file (``units/<concept>/s<seed>/<lever>.json``, and ``dev/`` for the learning-rate
choice) carries its training record (:func:`geosteer.bench.train_rule.fit_rule`): steps taken, whether its own
s = 1 control KL reached the target or the cap stopped it, the final KL, loss and preference margin, the pool
size a side, and the per-step log. The report writes the log as ``training.csv`` and summarises it per lever
beside the learning-rate choice (``learning_rates.json``: the grid, extended or not, whether the choice is
interior, the step cap).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

SUMMARY_KEYS = ("steps", "reached", "capped", "final_kl", "kl_target", "final_loss", "final_margin", "pool")


def train_record(doc: dict) -> dict | None:
    """The training record of one lever doc (None: a lever that trains nothing by the rule)."""
    t = (doc.get("info") or {}).get("train")
    return t if isinstance(t, dict) and "steps" in t else None


def unit_row(ctx: dict, name: str, doc: dict) -> dict:
    """The training summary columns of one unit (empty for a lever without a training record)."""
    t = train_record(doc)
    if t is None:
        return {}
    row = {f"train_{k}": t.get(k) for k in SUMMARY_KEYS}
    pool = t.get("pool")
    row["train_pool"] = min(pool) if pool else None  # the smaller side (a plain number: units.csv keeps it)
    return row


def step_rows(units: Iterable[tuple[dict, dict]]) -> list[dict]:
    """Every logged training step: concept, seed, lever, lr, step, loss, margin, kl_s1 (where checked)."""
    out = []
    for ctx, levers in units:
        for name, doc in levers.items():
            t = train_record(doc)
            for row in (t or {}).get("log", []):
                out.append({"concept": ctx["concept"], "seed": ctx["seed"], "lever": name, "lr": doc.get("lr"),
                            **row})
    return out


def _median(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


def summary(units: Sequence[dict], lrs: dict | None) -> list[dict]:
    """Per learned lever: the learning rate chosen, whether it is interior, the grid it came from, the step cap,
    and over its test units the median and largest steps taken, how many reached the target, the median final
    control KL at s = 1, the smallest training pool a side (the rule asks for 32)."""
    search = (lrs or {}).get("search") or {}
    cap = (lrs or {}).get("step_cap") or {}
    out = []
    for lever in dict.fromkeys(u["lever"] for u in units if u.get("train_steps") is not None):
        rows = [u for u in units if u["lever"] == lever and u.get("train_steps") is not None]
        s = search.get(lever) or {}
        out.append({"lever": lever, "lr": s.get("chosen"), "interior": s.get("interior"), "grid": s.get("grid"),
                    "step_cap": cap.get("cap"), "units": len(rows),
                    "steps_median": _median(u["train_steps"] for u in rows),
                    "steps_max": max(int(u["train_steps"]) for u in rows),
                    "reached": sum(bool(u.get("train_reached")) for u in rows),
                    "final_kl_median": _median(u.get("train_final_kl") for u in rows),
                    "pool_min": min((int(u["train_pool"]) for u in rows if u.get("train_pool")), default=None),
                    "kl_target": rows[0].get("train_kl_target")})
    return out


def _g(x, fmt: str = "{:.3g}") -> str:
    return "–" if x is None else fmt.format(x)


def summary_markdown(rows: Sequence[dict]) -> str:
    if not rows:
        return ""
    lines = ["How the learned levers were trained (one rule; test units):", "",
             "| lever | lr chosen | interior | steps (median / max) | step cap | reached the KL target | "
             "final s=1 KL (median) | smallest pool a side |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        interior = "–" if r["interior"] is None else ("yes" if r["interior"] else "no (grid edge)")
        lines.append(f"| {r['lever']} | {_g(r['lr'])} | {interior} | {_g(r['steps_median'], '{:.0f}')} / "
                     f"{r['steps_max']} | {_g(r['step_cap'])} | {r['reached']}/{r['units']} | "
                     f"{_g(r['final_kl_median'], '{:.4f}')} (target {_g(r['kl_target'])}) | "
                     f"{_g(r.get('pool_min'), '{:d}')} |")
    return "\n".join(lines) + "\n"
