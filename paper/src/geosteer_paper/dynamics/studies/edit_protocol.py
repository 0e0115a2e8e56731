"""``geosteer study dynamics edit-protocol``: the paper's App. C edit protocol (edit transfer, efficiency per
unit edit norm, held-out KL; query/key, attention-output and random baselines at equal norm; FFN-channel
ablation against random channels). Definitions in :mod:`geosteer_paper.dynamics.edit_protocol`; tidy records via
``--out`` (.json/.csv) / ``--csv``; ``--checkpoint`` keeps each finished layer, so a rerun resumes."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import (
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    MAX_SEEDS,
    MODEL_OPT,
    THREADS_OPT,
    check_layers,
    check_token_rank,
    emit,
    model_config,
)
from geosteer.cli.outputs import out_file
from geosteer.models.anatomy import anatomy, parse_layers
from geosteer_paper.dynamics.studies.common import (
    CSV_OPT,
    OUT_OPT,
    check_choices,
    parse_floats,
    parse_ints,
    run_meta,
    setup_model,
    write_rows,
)

TABLES = ("overall", "summary", "ablation_overall", "ablation_summary", "transfer", "edits", "ablation")


def _ffn_width(model: str) -> int | None:
    cfg = model_config(model)
    cfg = getattr(cfg, "text_config", None) or cfg
    width = getattr(cfg, "intermediate_size", None)
    return width if isinstance(width, int) else None


def _read_checkpoint(path: Path, run_key: dict) -> dict[int, tuple[list, list]]:
    """The layers an earlier run with the same ``run_key`` finished (empty where ``path`` does not exist)."""
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import read_json

    if not path.exists():
        return {}
    data = read_json(path, "--checkpoint")
    if not isinstance(data, dict) or not isinstance(data.get("layers"), dict):
        raise GeosteerError(f"--checkpoint {path}: not a checkpoint of this study (no 'layers' object)")
    if data.get("run") != run_key:
        raise GeosteerError(f"--checkpoint {path} holds another run ({data.get('run')}); give a new file")
    return {int(k): (v["edits"], v["ablation"]) for k, v in data["layers"].items()}


def edit_protocol(model: str = MODEL_OPT, layers: str = typer.Option("all", "--layers"),
                  sizes: str = typer.Option("0.5,1,2,4,8", "--sizes", help="edit sizes s = ‖ΔW‖_F (>= 2, > 0)"),
                  neurons: int = typer.Option(32, "--neurons", help="value neurons per FFN edit (n)"),
                  neuron_rule: str = typer.Option("activation", "--neuron-rule",
                                                  help="activation: largest |a_j| at the last position; "
                                                       "alignment: value vector most aligned with the target"),
                  ks: str = typer.Option("32,128,512", "--ks", help="FFN channels ablated (k)"),
                  channel_rule: str = typer.Option("attribution", "--channel-rule",
                                                   help="attribution: largest first-order target-logit drop "
                                                        "Σ_t a_j ∂z/∂a_j; activation: largest |a_j| at the end"),
                  sites: str = typer.Option("value,random,query,key,attn_out", "--sites",
                                            help="edit sites (rome: a ROME-style rank-one edit, added baseline)"),
                  cov_tokens: int = typer.Option(8192, "--cov-tokens",
                                                 help="train-split tokens for the rome edit's key second moment"),
                  direction: str = typer.Option("unembed", "--direction", help="unembed | centered"),
                  target_rank: int = typer.Option(10, "--target-rank", help="edit target = this rank (0 = top)"),
                  ablate_rank: int = typer.Option(0, "--ablate-rank", help="ablation target = this rank"),
                  seeds: int = typer.Option(5, "--seeds", max=MAX_SEEDS, help="random baselines (seeds 0..N-1)"),
                  prompts: int = typer.Option(4, "--prompts", help="held-out windows edited (one edit each)"),
                  heldout: int = typer.Option(1, "--heldout", help="other held-out windows for the KL"),
                  seq_len: int = typer.Option(32, "--context"),
                  checkpoint: Path | None = typer.Option(None, "--checkpoint", callback=out_file(".json"),
                                                         help="keep each finished layer here; a rerun resumes"),
                  as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
                  threads: int = THREADS_OPT, device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """FFN value-path edits (n neurons) vs query/key, attention-output, random edits of equal norm; channel ablation."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.io_utils import atomic_write_json
    from geosteer_paper.dynamics.edit_protocol import ProtocolConfig
    from geosteer_paper.dynamics.edit_protocol import edit_protocol as run
    from geosteer_paper.dynamics.prefix import check_positive
    from geosteer_paper.dynamics.weight_edits import SITES

    for value, name in ((prompts, "--prompts"), (heldout, "--heldout"), (seeds, "--seeds")):
        check_positive(value, name)
    cfg = ProtocolConfig(sizes=tuple(parse_floats(sizes, "--sizes")), neurons=neurons, neuron_rule=neuron_rule,
                         ks=tuple(parse_ints(ks, "--ks")), channel_rule=channel_rule,
                         seeds=tuple(range(seeds)), sites=tuple(check_choices(sites, SITES, "edit site (--sites)")),
                         direction=direction, target_rank=target_rank, ablate_rank=ablate_rank)
    check_layers(model, "--layers", layers)  # before the widths, which the defaults may exceed
    for rank, name in ((target_rank, "--target-rank"), (ablate_rank, "--ablate-rank")):
        check_token_rank(model, name, rank)
    cfg.check(_ffn_width(model))
    run_key = {"model": model, "cfg": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(cfg).items()},
               "prompts": prompts, "heldout": heldout, "seq_len": seq_len, "device": device, "dtype": dtype}
    if "rome" in cfg.sites:
        check_positive(cov_tokens, "--cov-tokens")
        run_key["cov_tokens"] = cov_tokens
    done = _read_checkpoint(checkpoint, run_key) if checkpoint is not None else {}
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layers=layers)
    chosen = anatomy(m).check_layers(parse_layers(layers, anatomy(m).n_layers))
    windows = corpus_windows(tok, "heldout", (prompts + heldout) * seq_len, seq_len)

    def keep(layer: int, edit_rows: list, ablation_rows: list) -> None:
        done[layer] = (edit_rows, ablation_rows)
        if checkpoint is not None:
            atomic_write_json(checkpoint, {"run": run_key, "layers": {
                str(k): {"edits": e, "ablation": a} for k, (e, a) in sorted(done.items())}})

    cov_windows = corpus_windows(tok, "train", cov_tokens, seq_len) if "rome" in cfg.sites else None
    tables = run(m, windows[:prompts], windows[prompts:], chosen, cfg, done=done, on_layer=keep,
                 cov_windows=cov_windows)
    meta = run_meta(m, layers=chosen, prompts=prompts, heldout=heldout, seq_len=seq_len, **run_key["cfg"],
                    edit_norm="Frobenius norm of the weight change ΔW (= the size s)",
                    headline={"efficiency": f"dz / s at s = {min(cfg.sizes):g}",
                              "locality": f"kl_heldout at the mid-range size s = {cfg.mid:g}",
                              "ablation": f"k = {max(cfg.ks)}"},
                    text="prompts: the first held-out windows; KL text: the windows right after them",
                    **({"cov_tokens": cov_tokens, "cov_text": "train split, --context windows"}
                       if "rome" in cfg.sites else {}))
    write_rows([{"table": t, **r} for t in TABLES for r in tables[t]], meta, out, csv)
    if as_json:
        emit({"meta": meta, "overall": tables["overall"], "ablation": tables["ablation_overall"]}, True)
        return
    emit(tables["overall"], False, table_title="edits at equal norm (means over layers)")
    emit(tables["ablation_overall"], False, table_title="channel ablation (means over layers)")
