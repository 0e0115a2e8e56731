"""``geosteer bench decide``: the decisive steering benchmark (matched levers at matched control KL).

Runs the learning-rate choice on the dev concepts, then every test concept and seed (resumable), and writes the
tidy per-prompt records and the verdict (:mod:`geosteer.bench.decide_report`). ``--dry-run`` prints the design
and its predicted minimum detectable effect without loading a model; ``--report-only`` assembles what the
checkpoints hold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from geosteer.bench.cli_judge import JSON_OPT
from geosteer.bench.decide_dry import count, dry_run, power_note  # noqa: F401 - power_note re-exported
from geosteer.bench.decide_models import DEFAULT_MODEL
from geosteer.errors import GeosteerError

MODEL = DEFAULT_MODEL  # the steered model when --model is not given
# geosteer.cli.common's --model, declared here so that importing this module does not import the CLI package
# (whose import registers every verb, this one included)
MODEL_OPT = typer.Option(MODEL, "--model", "-m", help="smollm2 | gemma3-270m | qwen2.5-0.5b | qwen2.5-1.5b | "
                         "tiny-<family> | .gguf file | folder | hub id")
MAX_SEED = 2**31 - 1  # seeds every generator the benchmark seeds takes (numpy, torch, Python)


def cpu_cores() -> int:
    """The CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _names(option: str, value: str | None) -> list[str] | None:
    """A comma-separated list of names: None when not given; empty or repeated names refused."""
    from geosteer.cli.common import comma_names  # here: importing geosteer.cli registers this module's command

    return None if value is None else comma_names(option, value)


def _explore(explore: str | None) -> tuple[str, ...]:
    from geosteer.bench.design import EXPLORATORY

    names = tuple(_names("--explore", explore) or ())
    bad = [n for n in names if n not in EXPLORATORY]
    if bad:
        raise GeosteerError(f"--explore {','.join(bad)}: not a surface form; valid: {', '.join(EXPLORATORY)}")
    return names


def _seeds(seeds: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    if seeds is None:
        return default
    try:
        seed_list = tuple(int(x) for x in _names("--seed-list", seeds) or ())
    except ValueError:
        raise GeosteerError(f"--seed-list {seeds!r}: expected comma-separated integers, e.g. 0,1") from None
    bad = next((x for x in seed_list if not 0 <= x <= MAX_SEED), None)
    if bad is not None:
        raise GeosteerError(f"--seed-list: seed {bad} is out of range; seeds are integers 0 to {MAX_SEED}")
    if len(set(seed_list)) != len(seed_list):
        raise GeosteerError(f"--seed-list {seeds!r} names a seed twice; give each once")
    return seed_list


def _concepts(concepts_file: Path | None, bundled: bool = True, alone: str = "--concepts-only", design=None):
    """The test concepts (``alone``: what runs a file's concepts alone, for its messages); a file's concepts draw
    ``design``'s test prompts, and one concept alone runs where its unit is the prompt (t across its prompts)."""
    from geosteer.bench.decide_concepts import run_concepts
    from geosteer.bench.design import Design

    design = design or Design()

    if concepts_file is None:
        if not bundled:
            raise GeosteerError(f"{alone}: give --concepts FILE (it runs that file's concepts without the "
                                "bundled ones)")
        return run_concepts()
    source = str(concepts_file)
    try:
        got = run_concepts(source, 0, bundled, design.test_prompts)  # a bad file or a small concept: one line
    except GeosteerError as e:
        msg = str(e)
        if not msg.startswith("--concepts"):
            msg = f"--concepts {msg}" if msg.startswith(source) else f"--concepts {source}: {msg}"
        raise GeosteerError(msg) from None
    if not bundled and len(got) < (1 if design.unit == "prompt" else 2):
        other = ("drop --concepts-only to add it to the bundled concepts" if alone == "--concepts-only" else
                 "the concepts admitted on one model go in one file")
        raise GeosteerError(f"{alone}: {source} holds {len(got)} concept ({', '.join(c.name for c in got)}); "
                            f"the verdict's t test is across concepts and needs >= 2: give a file of 2 or more "
                            f"({other})")
    return got


def _enough(chosen: list, unit: str = "concept") -> None:
    """A dry run's predicted MDE needs two concepts or more (one, where the unit is the prompt); else one line
    saying what is valid."""
    if len(chosen) < (1 if unit == "prompt" else 2):
        names = ", ".join(c.name for c in chosen) or "none"
        raise GeosteerError(f"--dry-run: {len(chosen)} test concept chosen ({names}); the predicted minimum "
                            "detectable effect is of the t test across concepts, which needs >= 2: name 2 or more "
                            "with --only, or leave --only out")


def _named(name: str):
    """The named design ``name`` (:data:`geosteer.bench.design.DESIGNS`); else one line."""
    from geosteer.bench.design import DESIGNS

    if name not in DESIGNS:
        raise GeosteerError(f"--design {name!r}: not a named design; valid: {', '.join(DESIGNS)}")
    return DESIGNS[name]


def _take(tests: list, design, name: str, names: list[str] | None,
          concepts_file: Path | None) -> tuple[list, list[str] | None]:
    """(the test concepts the design takes, the ``--only`` names or, for a design of some kinds, theirs): a
    design's ``kinds`` select among the bundled concepts (a concept file's are all taken)."""
    if not design.kinds:
        return tests, names
    keep = [c for c in tests if c.kind in design.kinds or c.extra.get("source")]
    if concepts_file is not None and len(keep) == len(tests):
        return tests, names
    bad = [n for n in names or () if n not in {c.name for c in keep}]
    if bad:
        file = " and the file's" if concepts_file is not None else ""
        raise GeosteerError(f"--only {bad[0]}: the {name} design takes the {' and '.join(design.kinds)} "
                            f"concepts{file} only")
    return keep, names if names is not None else [c.name for c in keep]


def _check(out: Path, workers: int, concepts: str | None, seeds: str | None,
           report_only: bool, concepts_file: Path | None = None, bundled: bool = True,
           design=None, design_name: str = "full") -> tuple[list[str] | None, tuple, list]:
    """Every option checked before any model loads: (``--only`` names, seeds (default: ``design``'s), the test
    concepts)."""
    from geosteer.bench.decide_concepts import by_name
    from geosteer.bench.design import STATE_FILE, Design
    from geosteer.io_utils import check_resumable_folder

    if workers < 1:
        raise GeosteerError(f"--workers must be >= 1 (got {workers})")
    if workers > cpu_cores():
        raise GeosteerError(f"--workers {workers}: at most {cpu_cores()} (the CPU cores here; each worker is a "
                            "process with its own models)")
    check_resumable_folder(out, STATE_FILE)
    if report_only and not (out / STATE_FILE).is_file():
        raise GeosteerError(f"--report-only: --out {out} holds no run of `geosteer bench decide` (no {STATE_FILE})")
    design = design if design is not None else Design()
    tests = _concepts(concepts_file, bundled, f"--design {design_name}" if design.file_only else "--concepts-only",
                      design)
    names = _names("--only", concepts)
    if names is not None:
        try:
            by_name(names, str(concepts_file) if concepts_file is not None else None, 0, bundled, design.test_prompts)
        except GeosteerError as e:  # an unknown or dev concept: one line naming the option
            raise GeosteerError(f"--only: {e}") from None
    return names, _seeds(seeds, design.seeds), tests


def _check_models(model: str, reader: str | None, installed: bool = True) -> str:
    """The fluency reader of ``model`` (``--reader``, else the default by family), both checked before any model
    loads (:func:`geosteer.bench.decide_models.check_models`; ``installed``: a bundled model must be installed)."""
    from geosteer.bench.decide_models import check_models

    return check_models(model, reader, installed)


def _prepare(out: Path, model: str, reader: str, concepts_file: Path | None, design, explore: tuple[str, ...],
             seeds: tuple[int, ...], report_only: bool, bundled: bool = True) -> dict:
    """The run folder checked (its design, model and reader against this run's, every measured file read and
    verified, a killed run's temporary files removed); the state to record."""
    from geosteer.bench.decide_concepts import grouped, identity, pool_record
    from geosteer.bench.decide_draw import record
    from geosteer.bench.decide_folder import check_files, check_state, remove_stale_tmp, state_doc
    from geosteer.bench.decide_run import LEVERS, VERSION
    from geosteer.bench.design import STATE_FILE

    concepts = identity(str(concepts_file) if concepts_file is not None else None, bundled)
    by_request = concepts_file is not None and grouped(str(concepts_file), every=False)
    want = state_doc(model, reader, concepts, design.to_dict(), list(LEVERS), list(explore), list(seeds),
                     record(pool_record(design.test_prompts), by_request))
    have = check_state(out, STATE_FILE, None if report_only else want)
    if out.is_dir():
        remove_stale_tmp(out)
        check_files(out, VERSION)
    return {"want": want, "have": have}


def _recorded_design(out: Path, have: dict | None, design):
    """The design a run folder records (what ``--report-only`` reports), else ``design``."""
    from geosteer.bench.decide_driver import _design

    if have is None or not isinstance(have.get("design"), dict):
        return design
    try:
        return _design(have["design"])
    except (TypeError, KeyError, ValueError):
        raise GeosteerError(f"--report-only: --out {out} records a design this version of geosteer cannot read; "
                            "report it with the version that measured it") from None


def _print_dry(design, chosen: list, workers: int, extra: tuple[str, ...], model: str, reader: str,
               json_out: bool, file: tuple = (None, True, None)) -> None:
    """The dry run's line (or JSON): the design, its predicted MDE and its CPU-hour estimate for ``model``; with
    ``file`` (its source, whether the bundled concepts are added, the design's name unless --only chose), what
    the file gives and, for the file alone, the same with the bundled concepts added."""
    from geosteer.bench.decide_concepts import grouped
    from geosteer.bench.decide_draw import summary_line

    source, bundled, design_name = file
    by_request = source is not None and grouped(source, every=False)
    n = len(chosen)
    pool = min((c.extra.get("pools", {}).get("prompts", design.test_prompts) for c in chosen),
               default=design.test_prompts)
    doc = dry_run(design, n, sum(c.concept.direction == "suppress" for c in chosen), workers, extra, model,
                  by_request, pool)
    cost = doc["cost"]
    unit = (f"; the unit is the test prompt: {doc['prompts_per_concept']} distinct prompts per concept, t with "
            f"{doc['prompts_per_concept'] - 1} df per concept" if doc["unit"] == "prompt" else "")
    sizes = (f"{count(n, 'concept')} x {count(design.test_prompts, 'prompt')} x {count(len(design.seeds), 'seed')}"
             f" x {count(len(design.kl_levels), 'KL level')}")
    typer.echo(json.dumps({**doc, "reader": reader}, indent=1) if json_out else
               f"{sizes}, {doc['comparisons']} comparisons (Holm){unit}: predicted minimum detectable effect "
               f"{doc['minimum_detectable_effect']:.3f} (80 % power); estimate for {model} "
               f"(reader {reader}): at most {cost['cpu_hours']:.1f} CPU-hours (dev {cost['dev_cpu_hours']:.1f}, "
               f"test {cost['test_cpu_hours']:.1f}), about {cost['wall_hours']:.1f} h on {count(workers, 'worker')}; "
               f"SmolLM2's measured costs x {cost['model_factor']:g}: {cost['model_factor_basis']}; the dev "
               f"phase up to {cost['dev_extended_cpu_hours']:.1f} CPU-hours if every learned lever's grid is "
               "extended 3 rates\n"
               f"{summary_line(doc['draws'])}" + (f"\nwarning: {doc['power']}" if doc["power"] else ""))
    if not json_out and source is not None:
        typer.echo(_file_line(source, chosen, bundled))
        if not bundled and design_name is not None and not design.file_only:
            typer.echo(_with_bundled(design, source, design_name))


def _file_line(source: str, chosen: list, bundled: bool = True) -> str:
    """What a run takes from a concept file: its concepts among the chosen ones, those named like a bundled one
    (the file's is run), and whether its texts are grouped."""
    from geosteer.bench.axbench import is_axbench
    from geosteer.bench.decide_concepts import grouped, test_concepts, tested_line

    own = [c.name for c in chosen if c.extra.get("source")]
    same = [n for n in own if bundled and n in {c.name for c in test_concepts()}]
    parts = [f"from {source}: {', '.join(own) or 'none'} of the {count(len(chosen), 'test concept')}"]
    if same:
        parts.append(f"{', '.join(same)} also {'names a' if len(same) == 1 else 'name'} bundled concept: the "
                     "file's is run")
    parts.append(("texts held out by request (the rows' input)" if is_axbench(source) else "texts held out by group")
                 + f"; {tested_line(source)}" if grouped(source) else
                 "no text groups: texts dealt one by one (texts that answer one request can fall on both sides of "
                 "the judge's split; format 2's groups keep them together)")
    return "; ".join(parts)


def _with_bundled(design, source: str, design_name: str) -> str:
    """The dry run of the same file with the bundled concepts added (what --concepts-only gives up)."""
    from geosteer.bench.decide_concepts import run_concepts

    every = run_concepts(source, 0, True, design.test_prompts)
    tests, _ = _take(every, _named(design_name), design_name, None, Path(source))
    mde = dry_run(design, len(tests))["minimum_detectable_effect"]
    return (f"without --concepts-only (the file's concepts added to the bundled ones): {count(len(tests), 'concept')}, "
            f"predicted minimum detectable effect {mde:.3f}")


def decide_cmd(
    out: Path = typer.Option(Path("results/decide"), "--out", help="output folder (resumable)"),
    workers: int | None = typer.Option(None, "--workers", help="worker processes (each its own models, one "
                                        "torch thread), at most the CPU cores; default 2 (1 on one core)"),
    concepts_file: Path = typer.Option(None, "--concepts", help="concept file (geosteer's JSON or an AxBench file) "
                                       "whose concepts are added to the bundled test concepts (one of the same "
                                       "name takes its place)"),
    concepts_only: bool = typer.Option(False, "--concepts-only", help="with --concepts: that file's concepts "
                                       "alone, without the bundled ones (fewer concepts: a larger minimum "
                                       "detectable effect; see --dry-run)"),
    concepts: str = typer.Option(None, "--only", help="comma-separated test concept names (default: all 22)"),
    seeds: str = typer.Option(None, "--seed-list", help="comma-separated seeds (default: the design's 0,1)"),
    dry: bool = typer.Option(False, "--dry-run", help="print the design, its CPU-hour estimate (for --model) and "
                             "predicted MDE; load nothing"),
    report_only: bool = typer.Option(False, "--report-only", help="assemble what the checkpoints hold"),
    explore: str = typer.Option(None, "--explore", help="other surface forms to measure beside the matched "
                                "levers, reported apart from the verdict: surfaces-rank2, surfaces-full"),
    kl_levels: str = typer.Option(None, "--kl-levels", help="comma-separated control-KL levels of the frontier "
                                  "(each in (0, 5] nats, sorted, at most 10, holding the rule's 0.05 and 0.2); "
                                  "default: the design's (full: 0.02,0.05,0.1,0.2,0.5)"),
    design_name: str = typer.Option("full", "--design", help="the named design: full (every bundled concept, "
                                    "5 KL levels, up to 96 steps of 8 passages a side), trimmed (the 18 topic "
                                    "concepts, 3 KL levels, up to 32 steps of 4 passages, a 3-point grid: about 13 "
                                    "CPU-hours on 2 cores on smollm2) or instruct (the --concepts file's concepts "
                                    "alone, 32 test prompts a concept, the 2 decision levels, one seed, up to 12 "
                                    "steps of 4 passages, the dev phase on one dev concept with 3-point grids "
                                    "around SmolLM2's choices)"),
    model: str = MODEL_OPT,
    reader: str = typer.Option(None, "--reader", help="the fluency reader, of another model family than --model "
                               "(default by family: gemma3-270m for a Llama such as smollm2, else smollm2)"),
    json_out: bool = JSON_OPT,
) -> None:
    """The decisive steering benchmark: every lever at matched control KL.

    The default model is smollm2; the verdict is read at control KL 0.05 and 0.2."""
    from dataclasses import replace

    from geosteer.bench.design import STATE_FILE, parse_levels

    base = _named(design_name)
    levels = parse_levels(kl_levels) if kl_levels is not None else base.kl_levels
    extra = _explore(explore)
    workers = min(2, cpu_cores()) if workers is None else workers
    bundled = not (concepts_only or base.file_only)  # a file-only design runs the file's concepts alone
    names, seed_list, tests = _check(out, workers, concepts, seeds, report_only, concepts_file, bundled, base,
                                     design_name)
    reader = "" if report_only else _check_models(model, reader, installed=not dry)
    tests, names = _take(tests, base, design_name, names, concepts_file)
    design = replace(base, kl_levels=levels)  # the seeds to run stay out of it: a unit's checkpoint does not
    # depend on them
    source = str(concepts_file) if concepts_file is not None else None
    if dry:
        chosen = [c for c in tests if names is None or c.name in names]
        _enough(chosen, design.unit)
        _print_dry(replace(design, seeds=seed_list), chosen, workers, extra, model, reader, json_out,
                   (source, bundled, design_name if names is None else None))
        from geosteer.bench.decide_models import not_installed

        for line in not_installed(model, reader):  # the run refuses these; the dry run says so and goes on
            typer.echo(f"note: {line}; the run refuses until it is installed", err=json_out)
        return
    state = _prepare(out, model, reader, concepts_file, design, extra, seed_list, report_only, bundled)
    from geosteer.bench.decide_driver import RunSpec, run_all
    from geosteer.bench.decide_folder import record_state
    from geosteer.bench.decide_report import write_report

    if report_only:
        design = _recorded_design(out, state["have"], design)
    else:
        record_state(out, STATE_FILE, state["want"], state["have"])
        if source is not None:
            typer.echo(_file_line(source, tests, bundled), err=True)
        run_all(RunSpec(model, str(out), design.to_dict(), concepts_file=source, explore=extra, reader=reader,
                        bundled=bundled), workers, names, seed_list)
    doc = write_report(out, design)
    typer.echo(json.dumps(doc["verdicts"], indent=1) if json_out else doc["markdown"].rstrip("\n"))
