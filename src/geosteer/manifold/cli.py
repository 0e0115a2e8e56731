"""``geosteer manifold ...``: edit and explore surface artifacts (``train`` comes from train.py; ``geosteer show``
describes them)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from geosteer.cli.common import (
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    MODEL_OPT,
    THREADS_OPT,
    check_layers,
    check_positions,
    emit,
    set_threads,
)
from geosteer.cli.common import load as load_model  # `load` below is geosteer.manifold.load (surfaces)
from geosteer.cli.outputs import out_artifact, out_file, out_records, out_trained_artifact
from geosteer.viz.cli import QK_PROMPT

man = typer.Typer(no_args_is_help=True,
                  help="Attention manifolds: learned B-spline value-modulation surfaces.")

from geosteer.manifold.cli_import import import_cmd  # noqa: E402
from geosteer.manifold.cli_steer_learn import steer_learn_cmd  # noqa: E402
from geosteer.manifold.cli_wall_learn import wall_learn_cmd  # noqa: E402

man.command("wall-learn")(wall_learn_cmd)
man.command("steer-learn")(steer_learn_cmd)
man.command("import")(import_cmd)

MAX_GRID = 128  # grid intervals at most: coefficients grow as (g + 3)^2 per head and dimension
SURF_OPT = typer.Option(..., "--surfaces", "-s", help="surfaces artifact folder")
SAVE_DTYPE_HELP = "artifact storage dtype: float32 | float16"


@man.command("edit")
def edit_cmd(
    ops: list[str] = typer.Argument(..., help="edits, e.g. 'invert layer=8' 'scale=0.5 layer=8 head=3 "
                                    "dim=25' 'invert layer=8 head=2 dim=4 rows=5-10' 'set=1.5 layer=8 "
                                    "head=2 dim=4 row=5 col=5' 'wall layer=10' 'wall layer=10 top=8'"),
    surfaces: Path = SURF_OPT,
    out: Path = typer.Option(..., "--out", "-o", help="artifact folder to write (may equal --surfaces)",
                              callback=out_artifact("geosteer-surfaces")),
    save_dtype: str = typer.Option(None, "--save-dtype", help=SAVE_DTYPE_HELP + " (default: as the input)"),
    as_json: bool = JSON_OPT,
) -> None:
    """Edit surfaces (scale/invert/zero/set/wall on surfaces, heads, layers, rows/columns, top-N norms)."""
    from geosteer.manifold import load, read_config, save
    from geosteer.manifold.edit import apply_edits

    doc = read_config(surfaces)
    bank = load(surfaces)
    records = apply_edits(bank, ops)
    save(bank, out, dtype=save_dtype or doc.get("storage_dtype") or "float32")
    rows = [{"edit": r["edit"], "surfaces": r["surfaces"], "coefficients": r["coefficients"]}
            for r in records]
    if as_json:
        emit({"out": str(out), "edits": records}, True)
    else:
        emit(rows, False, table_title=f"applied to {surfaces} -> {out}")


@man.command("explore")
def explore_cmd(
    surfaces: Path = SURF_OPT,
    model: str = typer.Option(None, "--model", "-m", help="base model (default: the artifact's)"),
    prompts: str = typer.Option("steering_prompts", "--prompt-set",
                                help="bundled prompt set name or a JSON file (sensitivity prompts)"),
    prompt: list[str] = typer.Option(None, "--prompt", help="a prompt (repeatable; replaces --prompt-set)"),
    layers: str = typer.Option(None, "--layers", help="layers to ablate, e.g. 5-10 (default: all)"),
    top: int = typer.Option(10, "--top", min=0, help="largest surfaces to list"),
    net: str = typer.Option(None, "--net", help="print this surface's control net: LAYER,HEAD,DIM "
                            "(default: the largest surface)"),
    no_sensitivity: bool = typer.Option(False, "--no-sensitivity", help="skip the model runs"),
    windows: int = typer.Option(2, "--coverage-windows", min=0, max=1024,
                                help="held-out 128-token windows for grid coverage and wall leakage (0: skip them)"),
    out: Path = typer.Option(None, "--out", "-o", help="write the results as JSON", callback=out_file(".json")),
    record_qk: Path = typer.Option(None, "--record-qk", callback=out_records(),
                                   help="also record --qk-prompt's post-RoPE (q, k) self-pairs on the largest "
                                   "surfaces per layer into this file (tidy .json/.csv for `geosteer report`)"),
    qk_prompt: str = typer.Option(QK_PROMPT, "--qk-prompt", help="the prompt --record-qk records"),
    qk_top: int = typer.Option(8, "--qk-top", min=1, help="surfaces per layer --record-qk records (largest ‖C‖)"),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    force: bool = typer.Option(False, "--force", help="use the surfaces on --model even if they were "
                               "recorded for another base model"),
    as_json: bool = JSON_OPT,
) -> None:
    """Per-layer sensitivity (zero each layer, next-token KL), grid coverage and wall leakage on held-out
    windows, top-N surfaces by norm, one control net."""
    from geosteer.io_utils import atomic_write_json
    from geosteer.manifold import load, read_config
    from geosteer.manifold.edit import control_net, format_control_net
    from geosteer.manifold.explore import layer_norms, layer_sensitivity, top_surfaces

    if "" in (prompt or []):
        raise ValueError("--prompt is empty; give the text of a prompt")
    if record_qk is not None and not qk_prompt:
        raise ValueError("--qk-prompt is empty; give the text --record-qk records")
    set_threads(threads)
    doc = read_config(surfaces)
    bank = load(surfaces)
    tops = top_surfaces(bank, top)
    result: dict = {"artifact": str(surfaces), "top_surfaces": tops, "layer_norms": layer_norms(bank)}
    if net:
        try:
            lhd = [int(x) for x in net.replace(" ", "").split(",")]
            assert len(lhd) == 3
        except (ValueError, AssertionError):
            raise ValueError(f"--net wants LAYER,HEAD,DIM (got '{net}')") from None
    elif tops:
        lhd = [tops[0]["layer"], tops[0]["head"], tops[0]["dim"]]
    else:
        lhd = None
    if lhd is not None:
        cn = control_net(bank, *lhd)
        result["control_net"] = {"layer": lhd[0], "head": lhd[1], "dim": lhd[2], "values": cn.tolist()}
    if not no_sensitivity or record_qk is not None:
        name = model or doc.get("base_model")
        if not name:
            raise ValueError("the artifact does not name its base model; pass --model")
        check_layers(name, "--layers", layers)
        m, tok = load_model(name, threads=threads, device=device, dtype=dtype)
        bank = load(surfaces, model=m, force=force)
    if record_qk is not None:
        from geosteer.viz.cli import record_qk_points

        result["record_qk"] = record_qk_points(m, tok, bank, surfaces, name, qk_prompt, qk_top, record_qk)
    if not no_sensitivity:
        from geosteer.eval.prompts import load_prompts
        from geosteer.models.anatomy import anatomy, parse_layers

        texts = list(prompt) if prompt else [p.text for p in load_prompts(prompts)]
        result["prompts"] = len(texts)
        layer_list = parse_layers(layers, anatomy(m).n_layers)
        result["sensitivity"] = layer_sensitivity(m, tok, bank, texts, layers=layer_list)
        if windows > 0:
            from geosteer.manifold.coverage import grid_coverage, heldout_windows, wall_leakage

            wins = heldout_windows(tok, windows)
            result["coverage"] = grid_coverage(m, tok, bank, wins)
            result["wall_leakage"] = wall_leakage(m, tok, bank, wins)
    if out is not None:
        atomic_write_json(out, result)
    if as_json:
        emit(result, True)
        return
    if "sensitivity" in result:
        emit([{k: v for k, v in r.items()} for r in result["sensitivity"]], False,
             table_title=f"layer sensitivity: zero one layer's surfaces, next-token KL over {len(texts)} "
                         "prompts")
    if result.get("coverage"):
        emit([{k: r[k] for k in ("layer", "lo", "hi", "outside", "q_outside", "k_outside", "worst_head_outside",
                                  "dims_mostly_outside")}
              for r in result["coverage"]], False,
             table_title=f"grid coverage: attention-mass fraction with q or k outside the grid lo..hi "
                         f"({windows} held-out windows of 128 tokens)")
    if result.get("wall_leakage"):
        emit(result["wall_leakage"], False, table_title="wall leakage: region attention mass that still passes "
             "value (passing = Σ a·|gain| / Σ a in the region)")
    emit(tops, False, table_title=f"largest {len(tops)} surfaces (Frobenius norm)")
    if lhd is not None:
        typer.echo(f"control net of layer {lhd[0]} head {lhd[1]} dim {lhd[2]} (rows = query axis, "
                   "columns = key axis):")
        typer.echo(format_control_net(cn))
    if out is not None:
        typer.echo(f"wrote {out}")
    if record_qk is not None:
        typer.echo(f"wrote {record_qk} (q/k points of {result['record_qk']['tokens']} tokens on "
                   f"{result['record_qk']['surfaces']} surfaces)")


@man.command("train")
def train_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="artifact folder to write (state in <out>.train/)",
                              callback=out_trained_artifact("geosteer-surfaces")),
    model: str = MODEL_OPT,
    grid: int = typer.Option(8, "--grid", max=MAX_GRID,
                             help="grid intervals g (K = g + 3 basis functions)"),
    grid_range: tuple[float, float] = typer.Option((-4.0, 4.0), "--range", help="grid range LO HI"),
    calibrate: bool = typer.Option(False, "--calibrate", help="per-layer range from q/k quantiles"),
    quantile: float = typer.Option(0.99, "--quantile", help="quantile of |q|,|k| for --calibrate"),
    layers: str = typer.Option("all", "--layers", help="e.g. 8-15, 0,2,5-7 or all"),
    rank: int = typer.Option(None, "--rank", help="train rank-r surfaces, C = U Wᵀ with r < K "
                             "(default: full rank)"),
    tokens: int = typer.Option(None, "--tokens", help="training tokens (default 262144 unless --steps)"),
    steps: int = typer.Option(None, "--steps", help="optimizer steps (overrides --tokens)"),
    seq_len: int = typer.Option(128, "--context", help="training window length in tokens"),
    batch: int = typer.Option(8, "--batch-size", help="windows per step (global)"),
    micro_batch: int = typer.Option(None, "--micro-batch", help="split each step (less memory)"),
    lr: float = typer.Option(2e-2, "--lr"),
    warmup: int = typer.Option(None, "--warmup", help="warmup steps (default 5%)"),
    seed: int = typer.Option(0, "--seed"),
    text: str = typer.Option("train", "--text", help="corpus split (train) or a UTF-8 text file"),
    eval_tokens: int = typer.Option(16384, "--eval-tokens", help="held-out tokens per evaluation"),
    eval_every: int = typer.Option(0, "--eval-every", help="steps between held-out evaluations"),
    checkpoint_every: int = typer.Option(25, "--checkpoint-every"),
    resume: bool = typer.Option(False, "--resume", help="continue from <out>.train/checkpoint.safetensors"),
    overwrite: bool = typer.Option(False, "--overwrite", help="start over even if a checkpoint exists"),
    save_dtype: str = typer.Option(None, "--save-dtype", help=SAVE_DTYPE_HELP + " (default float32)"),
    mixed_precision: str = typer.Option("no", "--mixed-precision", help="no|bf16|fp16 (accelerate; GPU)"),
    fsdp: bool = typer.Option(False, "--fsdp", help="shard the frozen model over the processes "
                                                    "(accelerate launch, FSDP2)"),
    schedule: str = typer.Option("cosine", "--schedule", help="lr schedule: cosine (warmup, cosine to 0.1x) | "
                                 "linear | constant (transformers' schedules)"),
    log_with: str = typer.Option(None, "--log-with", help="experiment trackers, e.g. tensorboard or "
                                 "tensorboard,wandb (accelerate; logs in <out>.train/logs)"),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Train attention surfaces on a frozen model (only the coefficients train)."""
    from geosteer import anatomy
    from geosteer.manifold.train import check_options, train_surfaces
    from geosteer.models.anatomy import parse_layers
    from geosteer.train import TrainConfig

    if tokens is None and steps is None:
        tokens = 262_144
    dtype_note = save_dtype is None and dtype != "float32"  # before 0.2, --dtype here was the storage dtype
    save_dtype = save_dtype or "float32"
    check_options(out=out, grid_size=grid, grid_range=tuple(grid_range), calibrate=calibrate,
                  quantile=quantile, storage_dtype=save_dtype, text=text, rank=rank)
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one (continue, or start over)")
    from geosteer.data.corpus import SPLITS

    if text not in SPLITS:
        from geosteer.eval.textfile import check_text_file

        check_text_file(text, "--text file")
    if dtype_note:
        typer.echo(f"note: --dtype {dtype} sets the model weights (as on every verb); the artifact is stored "
                   "as float32 (--save-dtype float16 for half)", err=True)
    check_layers(model, "--layers", layers)  # the syntax; the range too where the config names it
    check_positions(model, "--context", seq_len)
    set_threads(threads)
    cfg = TrainConfig(lr=lr, steps=steps, tokens=tokens, batch_size=batch, micro_batch=micro_batch,
                      seq_len=seq_len, warmup_steps=warmup, seed=seed, eval_every=eval_every,
                      eval_tokens=eval_tokens, checkpoint_every=checkpoint_every,
                      mixed_precision=mixed_precision, fsdp=fsdp, schedule=schedule, log_with=log_with)
    if cfg.log_with:
        from geosteer.train.tracking import require_trackers

        require_trackers(cfg.log_with)  # before the model loads
    m, tok = load_model(model, threads=threads, device=device, dtype=dtype)
    layer_list = parse_layers(layers, anatomy(m).n_layers)
    args = sys.argv[1:]
    if "train" in args[:3]:  # geosteer [..] manifold train ...
        args = args[args.index("train") + 1:]
    command = "geosteer manifold train " + " ".join(shlex.quote(a) for a in args)
    _, res = train_surfaces(m, tok, out, grid_size=grid, grid_range=tuple(grid_range),
                            calibrate=calibrate, calibrate_quantile=quantile, layers=layer_list, cfg=cfg,
                            text=text,
                            resume=resume, overwrite=overwrite, storage_dtype=save_dtype, rank=rank,
                            command=command,
                            progress=sys.stderr.isatty() and not as_json,
                            log=(lambda s: print(s, file=sys.stderr, flush=True)))
    summary = {"out": str(out), "steps": res.steps_done, "tokens": res.tokens_seen,
               "final_loss": res.final_loss, "ppl_before": res.ppl_before, "ppl_after": res.ppl_after,
               "seconds": round(res.seconds, 1)}
    emit(summary, as_json)


def register(app: typer.Typer) -> None:
    """Add the ``geosteer manifold`` sub-app."""
    app.add_typer(man, name="manifold")
