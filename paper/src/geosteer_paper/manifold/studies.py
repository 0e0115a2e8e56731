"""Paper studies of the attention-manifold method: ``geosteer study manifold strength|asymmetry``."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, THREADS_OPT, emit, set_threads
from geosteer.cli.common import load as load_model
from geosteer.cli.outputs import out_file

PAPER_RATE = (0.69, 0.83)  # Llama-3.2 1B / 3B, 112 prompts (abstract, Table 6)
SURF_OPT = typer.Option("artifacts/smollm2-surfaces", "--surfaces", "-s", help="surfaces artifact folder")


def _command(verb: str) -> str:
    args = sys.argv[1:]
    if verb in args:
        args = args[args.index(verb) + 1:]
    return f"geosteer study manifold {verb} " + " ".join(shlex.quote(a) for a in args)


def _scales(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--scales wants comma-separated numbers, e.g. 0.1,0.25,0.5,1 (got '{text}')") from None
    if not vals or any(not 0 < v <= 4 for v in vals) or len(set(vals)) != len(vals):
        raise ValueError(f"--scales wants distinct numbers in (0, 4] (got '{text}')")
    return sorted(vals)


def strength(
    surfaces: Path = SURF_OPT,
    model: str = typer.Option(None, "--model", "-m", help="base model (default: the artifact's)"),
    prompts: str = typer.Option("manifold_prompts", "--prompt-set", help="bundled prompt set name or a JSON file"),
    scales: str = typer.Option("0.1,0.25,0.5,0.75,1", "--scales", help="coefficient scales s (C -> s·C)"),
    max_new_tokens: int = typer.Option(30, "--max-new-tokens", min=1, max=512, help="greedy tokens per prompt"),
    out: Path = typer.Option(Path("manifold_strength.json"), "--out", "-o", callback=out_file(".json"),
                             help="tidy JSON (written after each scale)"),
    resume: bool = typer.Option(False, "--resume", help="keep the scales already in --out, run the others"),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Greedy change rate and next-token KL vs surface strength: stock vs the surfaces with every coefficient
    scaled by s, per prompt category."""
    from geosteer.eval.prompts import load_prompts
    from geosteer.io_utils import atomic_write_json, read_json
    from geosteer.manifold import load, read_config
    from geosteer.manifold.strength import interpolate_scale, strength_sweep

    scale_list = _scales(scales)
    prompt_list = load_prompts(prompts)
    doc = read_config(surfaces)
    done: dict = {"rows": [], "summary": []}
    if resume and out.is_file():
        done = read_json(out, "--out results file")
    todo = [s for s in scale_list if s not in {r["scale"] for r in done.get("summary", [])}]
    name = model or doc.get("base_model")
    if not name:
        raise ValueError("the artifact does not name its base model; pass --model")
    set_threads(threads)
    m, tok = load_model(name, threads=threads, device=device, dtype=dtype)
    bank = load(surfaces, model=m)
    meta = {"command": _command("strength"), "model": name, "surfaces": str(surfaces), "prompt_set": prompts,
            "prompts": len(prompt_list), "max_new_tokens": max_new_tokens, "scales": scale_list, "dtype": dtype,
            "paper_change_rate": list(PAPER_RATE), "layers": bank.layers}
    rows, summary = list(done.get("rows", [])), list(done.get("summary", []))
    t0 = time.time()
    for s in todo:
        r, sm = strength_sweep(m, tok, bank, prompt_list, [s], max_new_tokens=max_new_tokens,
                               log=lambda x: print(f"{x} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True))
        rows, summary = rows + r, sorted(summary + sm, key=lambda x: x["scale"])
        meta["complete"] = all(v in {x["scale"] for x in summary} for v in scale_list)
        meta["scale_reaching_paper_rate"] = [interpolate_scale(summary, p) for p in PAPER_RATE]
        atomic_write_json(out, {"meta": meta, "summary": summary, "rows": rows})
    overall = [x for x in summary if x["category"] == "all"]
    emit({"out": str(out), "overall": overall} if as_json else overall, as_json,
         table_title="greedy change rate vs surface strength (all prompts)")


def asymmetry(
    surfaces: Path = SURF_OPT,
    samples: int = typer.Option(33, "--samples", min=4, max=1025, help="grid points per axis for the sampled S"),
    out: Path = typer.Option(Path("manifold_asymmetry.json"), "--out", "-o", callback=out_file(".json")),
    as_json: bool = JSON_OPT,
) -> None:
    """Asymmetry S(q, k) ≠ S(k, q) per layer: the antisymmetric share ‖X − Xᵀ‖ / 2‖X‖ of each control net and of
    each sampled surface, averaged per layer (also weighted by ‖C‖); no model needed."""
    from geosteer.io_utils import atomic_write_json
    from geosteer.manifold import load
    from geosteer_paper.manifold.asymmetry import asymmetry_by_layer

    bank = load(surfaces)
    rows = asymmetry_by_layer(bank, samples)
    K = bank.K
    meta = {"command": _command("asymmetry"), "surfaces": str(surfaces), "samples": samples, "K": K,
            "base_model": bank.config.base_model,
            "measure": "||X - X^T||_F / (2 ||X||_F): 0 symmetric, 1 antisymmetric",
            "iid_gaussian_reference": ((K - 1) / (2 * K)) ** 0.5}
    atomic_write_json(out, {"meta": meta, "rows": rows})
    emit({"out": str(out), "rows": rows} if as_json else rows, as_json,
         table_title=f"asymmetry per layer (iid Gaussian control net: {meta['iid_gaussian_reference']:.3f})")
