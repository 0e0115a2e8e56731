"""Study 2 (paper §6.3): compression-error decomposition — per-layer ∥/⊥ update error, held-out PPL, Spearman ρ.

For each compression method (``geosteer_paper.directional.compression``: RTN, AWQ, GPTQ, the ⊥-weighted AWQ,
the simplified AWQ, Wanda unstructured and N:M, at the strength in the name) a compressed copy of the
model is made from calibration on train-split tokens; its held-out perplexity is measured on the first
``--ppl-tokens`` held-out tokens, and its update error e = Δ_comp − Δ_base is split against Δ_base per layer and site
(``update_errors``) on ``--prompts`` held-out prompts taken from the end of the held-out slice (no overlap
with the scored PPL tokens). With three or more methods, the Spearman ρ (scipy) of each mean error vs PPL
across the methods goes into the summary's meta (``spearman``; ``spearman_quantisers`` over the RTN /
AWQ / GPTQ rows alone). ``--model`` may also be a folder written by
``paper/studies/directional/compression_base.py`` (a from-scratch byte-level fp32 model): text is then read as
UTF-8 bytes, calibration sequences and prompts are ``--seq-len`` bytes, and the perplexity is per byte,
exp of the mean next-byte loss on ``--ppl-batches`` fixed held-out batches of 16 windows (the pretraining
study's validation protocol, generator seed 12345, drawn from the held-out bytes before the prompts).
Files: ``compression_layers.csv`` (per layer, site and method) and ``compression_summary.json`` (per
method; rewritten after each method). Resumable: a rerun of the same command into the same folder keeps the
methods it finished (and the uncompressed PPL) and runs only the rest.

    python paper/studies/directional/compression.py \\
        --methods rtn3,rtn4,awqlite3,awqlite4,wanda30,wanda50,wanda60,wanda4:8,wanda2:4 --ppl-tokens 2048 \\
        --threads 1

On the clean byte-level base (``compression_base.py``'s command first):

    python paper/studies/directional/compression.py --model .cache/compression-base-d192x8 \\
        --methods rtn4,rtn3,awqlite4,awq4,awq3,gptq4,gptq3,awq4-perp4,awq4-perp16,awq3-perp4,awq3-perp16,\\
wanda50,wanda4:8,wanda2:4 --calib-seqs 32 --seq-len 128 --prompts 12 --ppl-batches 32 \\
        --out-dir docs/results/directional/compression_clean --threads 1
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer_paper.scripts import command_line, run_script

SITES = ("attn", "mlp", "block")
ERRORS = ("perp_err", "par_err", "total_err")


def method_row(method: str, ppl: float, info: dict, rows: list[dict]) -> dict:
    """One method's summary row: PPL, the compressor's info and each site's error means over layers."""
    row = {"method": method, "ppl": ppl, **{k: v for k, v in info.items() if k != "method"}}
    for site in SITES:
        sel = [r for r in rows if r["site"] == site]
        for stat in ERRORS:
            row[f"{site}_{stat}"] = sum(r[f"{stat}_mean"] for r in sel) / len(sel)
    return row


QUANTISERS = ("rtn", "awq", "gptq", "awqlite")


def spearman_rows(summary: list[dict], kinds: Sequence[str] | None = None) -> list[dict]:
    """Spearman ρ of each site's mean error vs PPL across the compressed methods (only those of ``kinds``,
    when given; none under three)."""
    from scipy.stats import spearmanr

    from geosteer_paper.directional.compression import parse_method

    comp = [r for r in summary if r["method"] != "none"
            and (kinds is None or parse_method(r["method"])[0] in kinds)]
    if len(comp) < 3:
        return []
    ppls = [r["ppl"] for r in comp]
    out = []
    for site in SITES:
        for stat in ERRORS:
            rho, p = spearmanr([r[f"{site}_{stat}"] for r in comp], ppls)
            out.append({"site": site, "error": stat, "spearman_rho_vs_ppl": float(rho), "p_value": float(p),
                        "n_methods": len(comp)})
    return out


def _number(v: str | None):
    for cast in (int, float):
        try:
            return cast(v)
        except (TypeError, ValueError):
            pass
    return v


def finished(out_dir: Path, command: str) -> tuple[list[dict], list[dict]]:
    """(summary rows, layer rows) of an earlier run of the same ``command`` in ``out_dir``, restricted to the
    methods its summary records; empty when there is none or it was another command."""
    from geosteer.readers import read_csv_rows, read_json

    summ, layers = out_dir / "compression_summary.json", out_dir / "compression_layers.csv"
    if not summ.is_file():
        return [], []
    doc = read_json(summ, what="compression summary")
    if not isinstance(doc, dict) or not isinstance(doc.get("meta"), dict) or doc["meta"].get("command") != command:
        return [], []
    rows = [r for r in doc.get("rows", []) if isinstance(r, dict) and "method" in r]
    done = {r["method"] for r in rows}
    lrows = read_csv_rows(layers, what="compression layers") if layers.is_file() else []
    return rows, [{k: (v if k == "method" else _number(v)) for k, v in r.items()} for r in lrows
                  if r.get("method") in done]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python paper/studies/directional/compression.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--model", "-m", default="smollm2")
    ap.add_argument("--methods", default="rtn4,awq4,wanda50,wanda4:8,wanda2:4")
    ap.add_argument("--calib-seqs", type=int, default=16, help="calibration sequences from the train split")
    ap.add_argument("--seq-len", type=int, default=256, help="tokens per calibration sequence and prompt")
    ap.add_argument("--prompts", type=int, default=12, help="held-out prompts for the error decomposition")
    ap.add_argument("--ppl-tokens", type=int, default=1024)
    ap.add_argument("--ppl-batches", type=int, default=32, help="byte-level base: held-out batches of 16 windows")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--stride", type=int, default=512)
    ap.add_argument("--out-dir", type=Path, default=Path("docs/results/directional"))
    ap.add_argument("--threads", type=int, default=None)
    return ap


def byte_base(folder: Path):
    """The from-scratch byte-level model saved by compression_base.py (fp32, eval, geosteer attention)."""
    from transformers import AutoModelForCausalLM

    from geosteer.attention import use_geosteer_attention

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    use_geosteer_attention(model)
    return model.eval().requires_grad_(False)


def byte_setup(a: argparse.Namespace):
    """Byte-level base: (model, calibration batches, prompts, perplexity function, meta)."""
    import math

    from geosteer_paper.directional.pretrain import byte_ids, mean_loss, sample_batch

    m = byte_base(Path(a.model))
    ctx = m.config.max_position_embeddings
    if a.seq_len > ctx:
        raise GeosteerError(f"--seq-len {a.seq_len} is longer than the byte model's context {ctx}")
    train = byte_ids("train", max_chars=a.calib_seqs * a.seq_len * 4)
    calib = [train[None, i * a.seq_len:(i + 1) * a.seq_len] for i in range(a.calib_seqs)]
    held = byte_ids("heldout")
    cut = len(held) - a.prompts * a.seq_len
    prompts = [held[None, cut + i * a.seq_len: cut + (i + 1) * a.seq_len] for i in range(a.prompts)]
    g = torch.Generator().manual_seed(12345)
    vals = [sample_batch(held[:cut], g, 16, ctx) for _ in range(a.ppl_batches)]

    def ppl(model) -> float:
        try:
            return math.exp(mean_loss(model, vals))
        finally:
            model.eval()  # mean_loss leaves the model in train mode

    meta = {"model": str(a.model), "tokenizer": "bytes", "ppl": f"per byte, {a.ppl_batches}x16x{ctx} held-out "
            "windows (generator seed 12345)", "calib": f"{a.calib_seqs}x{a.seq_len} train bytes",
            "prompts": a.prompts, "prompt_len": a.seq_len}
    return m, calib, prompts, ppl, meta


def token_setup(a: argparse.Namespace):
    """A tokenised model: (model, calibration batches, prompts, perplexity function, meta)."""
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import encode, heldout_ids, strided_perplexity
    from geosteer.models.loading import load_model, model_id

    m, tok = load_model(a.model)
    seq_len = a.seq_len
    train = encode(tok, split_text("train", max_chars=a.calib_seqs * seq_len * 8))
    calib = [train[None, i * seq_len:(i + 1) * seq_len] for i in range(a.calib_seqs)]
    held = heldout_ids(tok, max(a.ppl_tokens, (a.prompts + 8) * seq_len))
    # prompts come from the end of the held-out slice so they do not overlap the scored PPL tokens
    prompts = [held[None, len(held) - (i + 1) * seq_len: len(held) - i * seq_len] for i in range(a.prompts)]
    ppl_ids = held[:a.ppl_tokens]

    def ppl(model) -> float:
        return strided_perplexity(model, tok, ids=ppl_ids, context=a.context, stride=a.stride).ppl

    meta = {"model": model_id(m), "calib": f"{a.calib_seqs}x{seq_len} train tokens", "prompts": a.prompts,
            "prompt_len": seq_len, "ppl_tokens": int(len(ppl_ids)), "context": a.context, "stride": a.stride}
    return m, calib, prompts, ppl, meta


def run(a: argparse.Namespace, argv: Sequence[str] | None) -> None:
    from geosteer.io_utils import write_records
    from geosteer_paper.directional.compression import calibrate, compress, parse_method, update_errors

    meths = [s.strip() for s in a.methods.split(",") if s.strip()]
    for meth in meths:
        parse_method(meth)  # one-line error naming the valid forms
    for name in ("calib_seqs", "seq_len", "prompts", "ppl_tokens", "ppl_batches"):
        if getattr(a, name) < 1:
            raise GeosteerError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(a, name)})")
    if a.threads:
        torch.set_num_threads(a.threads)
    command = command_line("directional/compression.py", argv)
    summary, layer_rows = finished(a.out_dir, command)
    done = {r["method"] for r in summary}
    if done:
        print(f"resuming: {', '.join(sorted(done))} done", flush=True)
    byte_level = (Path(a.model) / "base_training.json").is_file()
    m, calib_batches, prompt_ids, ppl_of, meta = (byte_setup if byte_level else token_setup)(a)
    t0 = time.time()
    calib = calibrate(m, calib_batches)
    print(f"calibrated on {meta['calib']} ({time.time() - t0:.0f} s)", flush=True)
    if "none" not in done:
        summary.insert(0, {"method": "none", "ppl": ppl_of(m)})
    meta = {"command": command, **meta}
    for meth in (x for x in meths if x not in done):
        t0 = time.time()
        comp, info = compress(m, meth, calib, batches=calib_batches)
        ppl = ppl_of(comp)
        rows = update_errors(m, comp, prompt_ids)
        del comp
        layer_rows += [{"method": meth, **r} for r in rows]
        row = method_row(meth, ppl, info, rows)
        summary.append(row)
        write_records(a.out_dir / "compression_layers.csv", layer_rows)
        write_records(a.out_dir / "compression_summary.json", summary, meta)
        print(f"{meth}: ppl {ppl:.3f} attn perp {row['attn_perp_err']:.4f} par {row['attn_par_err']:.4f} "
              f"({time.time() - t0:.0f} s)", flush=True)
    corr = spearman_rows(summary)
    write_records(a.out_dir / "compression_summary.json", summary,
                  {**meta, "spearman": corr, "spearman_quantisers": spearman_rows(summary, QUANTISERS)})
    for c in corr:
        print(f"spearman {c['site']} {c['error']}: rho={c['spearman_rho_vs_ppl']:.3f} (p={c['p_value']:.3f})")


def main(argv: Sequence[str] | None = None) -> None:
    run_script(parser(), run, argv)


if __name__ == "__main__":
    main()
