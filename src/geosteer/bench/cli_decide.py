"""``geosteer bench decide``: the decisive steering benchmark (matched levers at matched control KL).

Runs the learning-rate choice on the dev concepts, then every test concept and seed (resumable), and writes the
tidy per-prompt records and the verdict (:mod:`geosteer.bench.decide_report`). ``--dry-run`` prints the design
and its predicted minimum detectable effect without loading a model; ``--report-only`` assembles what the
checkpoints hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from geosteer.bench.cli_judge import JSON_OPT
from geosteer.errors import GeosteerError


def _explore(explore: str | None) -> tuple[str, ...]:
    from geosteer.bench.design import EXPLORATORY

    names = tuple(n.strip() for n in explore.split(",") if n.strip()) if explore else ()
    bad = [n for n in names if n not in EXPLORATORY]
    if bad:
        raise GeosteerError(f"--explore {','.join(bad)}: not a surface form; valid: {', '.join(EXPLORATORY)}")
    return names


def _check(out: Path, workers: int, concepts: str | None, seeds: str | None,
           report_only: bool, concepts_file: Path | None = None) -> tuple[list[str] | None, tuple]:
    from geosteer.bench.decide_concepts import by_name
    from geosteer.bench.design import STATE_FILE, Design
    from geosteer.io_utils import check_resumable_folder

    if workers < 1:
        raise GeosteerError(f"--workers must be >= 1 (got {workers})")
    check_resumable_folder(out, STATE_FILE)
    if report_only and not (out / STATE_FILE).is_file():
        raise GeosteerError(f"--report-only: --out {out} holds no run of `geosteer bench decide` (no {STATE_FILE})")
    source = str(concepts_file) if concepts_file is not None else None
    if source is not None:
        try:
            by_name(None, source)  # a bad file or a concept too small: one line, before any model loads
        except GeosteerError as e:
            msg = str(e)
            if not msg.startswith("--concepts"):
                msg = f"--concepts {msg}" if msg.startswith(source) else f"--concepts {source}: {msg}"
            raise GeosteerError(msg) from None
    names = [n.strip() for n in concepts.split(",") if n.strip()] if concepts else None
    if names is not None:
        by_name(names, source)  # unknown names: one line naming the valid ones
    try:
        seed_list = tuple(int(x) for x in seeds.split(",")) if seeds else Design().seeds
    except ValueError:
        raise GeosteerError(f"--seed-list {seeds!r}: expected comma-separated integers, e.g. 0,1") from None
    return names, seed_list


def dry_run(design, n_concepts: int) -> dict:
    """The design and its predicted minimum detectable effect (from the design's prior variance components)."""
    from geosteer.bench.decide_report import n_comparisons
    from geosteer.bench.design import ALPHA
    from geosteer.bench.stats import minimum_detectable_effect

    m = n_comparisons()
    mde = minimum_detectable_effect(n_concepts, design.test_prompts, len(design.seeds), design.prior_sd_concept,
                                    design.prior_sd_item, m, ALPHA, 0.8)
    return {"design": design.to_dict(), "concepts": n_concepts, "comparisons": m,
            "minimum_detectable_effect": mde}


def decide_cmd(
    out: Path = typer.Option(Path("results/decide"), "--out", help="output folder (resumable)"),
    workers: int = typer.Option(2, "--workers", help="worker processes (each its own models, one torch thread)"),
    concepts_file: Path = typer.Option(None, "--concepts", help="concept file (geosteer's JSON list or an AxBench "
                                       "file) instead of the 22 bundled test concepts"),
    concepts: str = typer.Option(None, "--only", help="comma-separated test concept names (default: all 22)"),
    seeds: str = typer.Option(None, "--seed-list", help="comma-separated seeds (default: the design's 0,1)"),
    dry: bool = typer.Option(False, "--dry-run", help="print the design and its predicted MDE; load nothing"),
    report_only: bool = typer.Option(False, "--report-only", help="assemble what the checkpoints hold"),
    explore: str = typer.Option(None, "--explore", help="other surface forms to measure beside the matched "
                                "levers, reported apart from the verdict: surfaces-rank2, surfaces-full"),
    json_out: bool = JSON_OPT,
) -> None:
    """The decisive steering benchmark on SmolLM2: every lever at control KL 0.05 and 0.2, the verdict."""
    from dataclasses import replace

    from geosteer.bench.decide_concepts import by_name, test_concepts
    from geosteer.bench.design import Design

    extra = _explore(explore)
    names, seed_list = _check(out, workers, concepts, seeds, report_only, concepts_file)
    design = Design()  # the seeds to run stay out of it: a unit's checkpoint does not depend on them
    source = str(concepts_file) if concepts_file is not None else None
    n = len(names) if names else len(by_name(None, source)) if source else len(test_concepts())
    if dry:
        design = replace(design, seeds=seed_list)
        doc = dry_run(design, n)
        typer.echo(json.dumps(doc, indent=1) if json_out else
                   f"{n} concepts x {design.test_prompts} prompts x {len(design.seeds)} seeds, "
                   f"{doc['comparisons']} comparisons (Holm): predicted minimum detectable effect "
                   f"{doc['minimum_detectable_effect']:.3f} (80 % power)")
        return
    from geosteer.bench.decide_driver import RunSpec, run_all
    from geosteer.bench.decide_report import write_report

    spec = RunSpec("smollm2", str(out), design.to_dict(), concepts_file=source, explore=extra)
    if not report_only:
        run_all(spec, workers, names, seed_list)
    doc = write_report(out, design)
    typer.echo(json.dumps(doc["verdicts"], indent=1) if json_out else doc["markdown"])
