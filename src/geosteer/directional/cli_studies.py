"""CLI verbs for studies 2 and 3 (compression-error decomposition, training-time parallel removal)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from geosteer.cli.common import MODEL_OPT, THREADS_OPT, set_threads


def compression_cmd(
    model: str = MODEL_OPT,
    methods: str = typer.Option("rtn4,awq4,wanda50,wanda4:8,wanda2:4", "--methods"),
    calib_seqs: int = typer.Option(16, "--calib-seqs", help="calibration sequences from the train split"),
    seq_len: int = typer.Option(256, "--seq-len", help="tokens per calibration sequence and prompt"),
    prompts: int = typer.Option(12, "--prompts", help="held-out prompts for the error decomposition"),
    ppl_tokens: int = typer.Option(1024, "--ppl-tokens"),
    context: int = typer.Option(512, "--context"),
    stride: int = typer.Option(512, "--stride"),
    out_dir: Path = typer.Option(Path("docs/results/directional"), "--out-dir"),
    threads: int = THREADS_OPT,
) -> None:
    """Study 2: compressed copies, per-layer ∥/⊥ update error, held-out PPL, Spearman ρ (paper §6.3)."""
    from scipy.stats import spearmanr

    from geosteer.data.corpus import split_text
    from geosteer.directional.compression import calibrate, compress, parse_method, update_errors
    from geosteer.directional.studies import heldout_ids
    from geosteer.eval.perplexity import encode, strided_perplexity
    from geosteer.io_utils import write_records
    from geosteer.models.loading import load_model, model_id

    set_threads(threads)
    meths = [s.strip() for s in methods.split(",") if s.strip()]
    for meth in meths:
        parse_method(meth)  # one-line error naming the valid forms
    m, tok = load_model(model)
    train = encode(tok, split_text("train", max_chars=calib_seqs * seq_len * 8))
    calib_batches = [train[None, i * seq_len:(i + 1) * seq_len] for i in range(calib_seqs)]
    held = heldout_ids(tok, max(ppl_tokens, (prompts + 8) * seq_len))
    # prompts come from the end of the held-out slice so they do not overlap the scored PPL tokens
    prompt_ids = [held[None, len(held) - (i + 1) * seq_len: len(held) - i * seq_len] for i in range(prompts)]
    ppl_ids = held[:ppl_tokens]
    t0 = time.time()
    calib = calibrate(m, calib_batches)
    print(f"calibrated on {calib_seqs}x{seq_len} train tokens ({time.time() - t0:.0f} s)", flush=True)
    base_ppl = strided_perplexity(m, tok, ids=ppl_ids, context=context, stride=stride).ppl
    summary = [{"method": "none", "ppl": base_ppl}]
    layer_rows: list[dict] = []
    meta = {"model": model_id(m), "calib": f"{calib_seqs}x{seq_len} train tokens", "prompts": prompts,
            "prompt_len": seq_len, "ppl_tokens": int(len(ppl_ids)), "context": context, "stride": stride}
    for meth in meths:
        t0 = time.time()
        comp, info = compress(m, meth, calib)
        ppl = strided_perplexity(comp, tok, ids=ppl_ids, context=context, stride=stride).ppl
        rows = update_errors(m, comp, prompt_ids)
        del comp
        layer_rows += [{"method": meth, **r} for r in rows]
        row = {"method": meth, "ppl": ppl, **{k: v for k, v in info.items() if k != "method"}}
        for site in ("attn", "mlp", "block"):
            sel = [r for r in rows if r["site"] == site]
            for stat in ("perp_err", "par_err", "total_err"):
                row[f"{site}_{stat}"] = sum(r[f"{stat}_mean"] for r in sel) / len(sel)
        summary.append(row)
        write_records(out_dir / "compression_layers.csv", layer_rows)
        write_records(out_dir / "compression_summary.json", summary, meta)
        print(f"{meth}: ppl {ppl:.3f} attn perp {row['attn_perp_err']:.4f} par {row['attn_par_err']:.4f} "
              f"({time.time() - t0:.0f} s)", flush=True)
    comp_rows = [r for r in summary if r["method"] != "none"]
    corr = []
    if len(comp_rows) >= 3:
        ppls = [r["ppl"] for r in comp_rows]
        for site in ("attn", "mlp", "block"):
            for stat in ("perp_err", "par_err", "total_err"):
                rho, p = spearmanr([r[f"{site}_{stat}"] for r in comp_rows], ppls)
                corr.append({"site": site, "error": stat, "spearman_rho_vs_ppl": float(rho), "p_value": float(p),
                             "n_methods": len(comp_rows)})
    write_records(out_dir / "compression_summary.json", summary, {**meta, "spearman": corr})
    for c in corr:
        print(f"spearman {c['site']} {c['error']}: rho={c['spearman_rho_vs_ppl']:.3f} (p={c['p_value']:.3f})")


def pretrain_cmd(
    variants: str = typer.Option("baseline,attn_par,value_par", "--variants"),
    seeds: str = typer.Option("0,1", "--seeds"),
    steps: int = typer.Option(300, "--steps"),
    batch: int = typer.Option(16, "--batch"),
    ctx: int = typer.Option(128, "--ctx"),
    lr: float = typer.Option(3e-3, "--lr"),
    d_model: int = typer.Option(128, "--d-model"),
    layers: int = typer.Option(4, "--layers"),
    eval_every: int = typer.Option(25, "--eval-every"),
    val_batches: int = typer.Option(16, "--val-batches", help="fixed held-out batches for the val loss"),
    out_dir: Path = typer.Option(Path("docs/results/directional"), "--out-dir"),
    threads: int = THREADS_OPT,
) -> None:
    """Study 3: from-scratch byte-level models, baseline vs attention / value parallel removal."""
    import torch

    from geosteer.directional.pretrain import VARIANTS, _batch, byte_ids, train_one
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import write_records

    set_threads(threads)
    vs = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in vs if v not in VARIANTS]
    if bad:
        raise GeosteerError(f"unknown variant '{bad[0]}'; valid: {', '.join(VARIANTS)}")
    seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    train = byte_ids("train", max_chars=4_000_000)
    held = byte_ids("heldout")
    g = torch.Generator().manual_seed(12345)
    vals = [_batch(held, g, batch, ctx) for _ in range(val_batches)]
    model_kw = {"d_model": d_model, "layers": layers, "heads": max(1, d_model // 32), "ffn": 3 * d_model}
    curves, finals = [], []
    meta = {"steps": steps, "batch": batch, "ctx": ctx, "lr": lr, "model": model_kw, "tokenizer": "bytes",
            "train_bytes": int(len(train)), "val_tokens": val_batches * batch * ctx}
    for seed in seed_list:
        for v in vs:
            res = train_one(v, seed, train, vals, steps=steps, batch=batch, ctx=ctx, lr=lr,
                            eval_every=eval_every, model_kw=model_kw)
            curves += res["curve"]
            finals.append({"variant": v, "seed": seed, "final_val_loss": res["final_val"],
                           "params": res["params"], "seconds": round(res["seconds"], 1)})
            write_records(out_dir / "pretrain_curves.csv", curves)
            write_records(out_dir / "pretrain_final.json", finals, meta)


def register(sub: typer.Typer) -> None:
    """Add the study verbs to the ``geosteer directional`` sub-app."""
    sub.command("compression")(compression_cmd)
    sub.command("pretrain")(pretrain_cmd)
