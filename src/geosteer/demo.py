"""``geosteer demo``: the main job on the bundled default model, in a few minutes on 2 CPU cores.

1. load SmolLM2-135M-Instruct (converted once into the local cache), 2. held-out strided perplexity,
3. text quality: greedy text on twenty everyday prompts scored as ``geosteer bench text`` scores it
(repeated 4-grams, fluency score), beside the perplexity, 4. greedy continuations of a few prompts. With
trained surfaces (for SmolLM2 the package ships them: ``geosteer/assets/surfaces/smollm2-surfaces-fluent``, all
30 layers trained on 65k tokens with a fluency term, so they lower perplexity without making greedy text more
repetitive) it also shows perplexity and text quality with/without surfaces, greedy changes, one edit and one
wall, and writes an HTML report.
Every phase says what it does and how many steps it has; bars with an ETA on a terminal.
"""

from __future__ import annotations

import time
from pathlib import Path

from geosteer.data.corpus import split_text
from geosteer.eval.compare import kl_divergence, next_token_logprobs
from geosteer.eval.generation import generate
from geosteer.eval.perplexity import strided_perplexity
from geosteer.interventions import steer
from geosteer.io_utils import write_records
from geosteer.manifold.bank import SurfaceBank
from geosteer.manifold.edit import Edit, live
from geosteer.manifold.explore import layer_sensitivity
from geosteer.models.identity import same_model
from geosteer.progress import progress
from geosteer.terminal import console as make_console

SHIPPED_SURFACES = Path(__file__).resolve().parent / "assets" / "surfaces" / "smollm2-surfaces-fluent"
SHIPPED_FOR = "smollm2"  # the base model of the shipped surfaces
QUALITY_TOKENS = 48  # greedy tokens per everyday prompt in the text-quality check
DEMO_PROMPTS = [
    "The theory of relativity states that",
    "She saw the man with the telescope, and",
    "The chicken is ready to eat, so",
    "A good way to learn programming is",
    "The CAP theorem says that a distributed system",
]


def shipped_surfaces(model_name: str) -> Path | None:
    """The trained surfaces that ship inside the package for ``model_name`` (``smollm2`` or its Hub id),
    or None (another model, or a build without the package data)."""

    if same_model(model_name, SHIPPED_FOR) and (SHIPPED_SURFACES / "surfaces.safetensors").is_file():
        return SHIPPED_SURFACES
    return None


def run_demo(model_name: str = "smollm2", tokens: int = 4096, max_new_tokens: int = 24,
             surfaces: Path | None = None, out_dir: Path = Path("runs/demo"), *, device: str = "cpu",
             dtype: str = "float32", spec=None) -> dict:
    """The demo on ``model_name``: stock against the steered state ``spec`` (an
    :class:`~geosteer.recipe.InterventionSpec`; ``surfaces`` is ``spec.surfaces``). With no steering given,
    the shipped surfaces where they fit the model. Returns the summary."""
    from rich.table import Table

    from geosteer import anatomy, load_model

    console = make_console()
    t0 = time.time()
    spec = _steering(model_name, spec, surfaces, console)
    found = Path(spec.surfaces) if spec.surfaces is not None else None
    model, tok = load_model(model_name, dtype=dtype, device=device)
    an = anatomy(model)
    console.print(f"[bold]model[/] {model_name}: {an.n_layers} layers, d_model {an.d_model}, "
                  f"{an.n_heads}/{an.n_kv_heads} heads, head_dim {an.head_dim} (loaded in {time.time() - t0:.1f} s)")
    text = split_text("heldout")
    ivs = spec.build(model)
    bank = next((iv for iv in ivs if isinstance(iv, SurfaceBank)), None)
    states: list[tuple[str, list]] = [("stock", [])]
    if ivs:  # named "surfaces" when the surfaces are all the steering, else "steered"
        states.append(("surfaces" if set(spec.changed()) == {"surfaces"} else "steered", ivs))
    summary: dict = {"model": model_name, "heldout_tokens": tokens, "surfaces": str(found) if found else None,
                     "recipe": spec.changed()}
    ppl_table = Table(title=f"held-out perplexity (first {tokens} tokens, context 512, stride 256)")
    for col in ("state", "ppl", "bits/byte", "tokens"):
        ppl_table.add_column(col, overflow="fold")
    for i, (name, ivs) in enumerate(states):
        console.print(f"[{i + 1}/{len(states)}] held-out perplexity, {name}")
        with steer(model, *ivs):
            r = strided_perplexity(model, tok, text, context=512, stride=256, max_tokens=tokens, progress=True)
        summary[f"ppl_{name}"] = r.ppl
        ppl_table.add_row(name, f"{r.ppl:.3f}", f"{r.bits_per_byte:.4f}", str(r.tokens))
    console.print(ppl_table)
    summary.update(_text_quality(model, tok, states, summary, console))

    gen_table = Table(title="greedy continuations", show_lines=True)
    gen_table.add_column("prompt", overflow="fold")
    for name, _ in states:
        gen_table.add_column(name, overflow="fold")
    changed = 0
    console.print(f"greedy continuations: {len(DEMO_PROMPTS)} prompts x {len(states)} states")
    with progress(len(DEMO_PROMPTS) * len(states), "generate", unit="run") as step:
        for p in DEMO_PROMPTS:
            outs = []
            for _, ivs in states:
                with steer(model, *ivs):
                    outs.append(generate(model, tok, p, max_new_tokens))
                step()
            changed += len(outs) > 1 and outs[0].token_ids != outs[1].token_ids
            gen_table.add_row(p, *[o.text.strip() for o in outs])
    console.print(gen_table)
    if bank is not None:
        summary["greedy_changed"] = f"{changed}/{len(DEMO_PROMPTS)}"
        summary.update(_edit_wall_report(model, tok, ivs, bank, found, max_new_tokens, out_dir, console))
    console.print(f"done in {time.time() - t0:.0f} s")
    return summary


def _steering(model_name: str, spec, surfaces: Path | None, console):
    """The steered state: ``spec`` with ``surfaces`` set; with no steering at all, the shipped surfaces where
    they fit ``model_name`` (said on the console either way)."""
    from geosteer.recipe import InterventionSpec

    spec = spec if spec is not None else InterventionSpec()
    if surfaces is not None:
        spec = spec.with_values(surfaces=str(surfaces))
    if not spec.changed() and shipped_surfaces(model_name) is not None:
        spec = spec.with_values(surfaces=str(shipped_surfaces(model_name)))
    if not spec.changed():
        why = (f"the shipped surfaces are for {SHIPPED_FOR}, not {model_name}" if
               shipped_surfaces(SHIPPED_FOR) is not None else
               f"this installation has no shipped surfaces (expected at {SHIPPED_SURFACES})")
        console.print(f"[yellow]no trained surfaces: {why}. Showing the stock model only (no edits, no HTML "
                      "report); give --surfaces DIR or a Hub repo id org/name to see the rest.[/]")
    else:
        console.print(f"steering: {spec.changed()}")
    return spec


def _text_quality(model, tok, states: list[tuple[str, list]], summary: dict, console) -> dict:
    """Greedy text of each state on the twenty everyday prompts, scored as the steering benchmark scores a
    lever: share of repeated 4-grams, and the fluency score against the stock model's own continuations."""
    from rich.table import Table

    from geosteer.bench.text_quality import State, everyday_prompts, measure_states

    prompts = list(everyday_prompts())
    console.print(f"text quality: {len(prompts)} everyday prompts x {QUALITY_TOKENS} greedy tokens x "
                  f"{len(states)} states")
    rows = measure_states(model, tok, [State(n, ivs) for n, ivs in states], prompts, QUALITY_TOKENS)
    table = Table(title="lower perplexity, and text as good? (repeated 4-grams: lower is better; fluency score "
                        "as bench text scores it, 1 = as fluent as the stock model)")
    for col in ("state", "held-out ppl", "repeated 4-grams", "fluency score"):
        table.add_column(col, overflow="fold")
    out = {}
    for r in rows:
        rep, flu = r["repeated_4gram_share"]["mean"], r["fluency_score"]["mean"]
        out[f"repeated_4gram_share_{r['state']}"], out[f"fluency_score_{r['state']}"] = rep, flu
        ppl = summary["ppl_" + r["state"]]
        table.add_row(r["state"], f"{ppl:.3f}", f"{rep:.3f}", f"{flu:.3f}")
    console.print(table)
    return out


def _edit_wall_report(model, tok, ivs: list, bank, surfaces: Path, max_new_tokens: int, out_dir: Path,
                      console) -> dict:
    """Most sensitive layer → invert it (live) and wall its top-8 surfaces (live), the rest of ``ivs`` (the
    steering, ``bank`` among it) applied throughout; then an HTML report."""
    from rich.table import Table

    from geosteer.viz import surfaces as S
    from geosteer.viz.report import build_report

    console.print(f"layer sensitivity: zeroing each of {len(bank.layers)} layers' surfaces on "
                  f"{len(DEMO_PROMPTS)} prompts")
    with progress(len(bank.layers), "sensitivity", unit="layer") as step, \
            steer(model, *[iv for iv in ivs if iv is not bank]):
        sens = layer_sensitivity(model, tok, bank, DEMO_PROMPTS, progress=lambda done, total: step())
    layer = sens[0]["layer"]
    console.print(f"most sensitive layer (zeroing it moves next-token KL most): {layer} "
                  f"(mean KL {sens[0]['mean_kl']:.4f})")
    edits = {"invert": Edit("invert", layers=[layer]), "wall": Edit("wall", layers=[layer], top=8)}
    table = Table(title=f"edits on layer {layer} (vs trained surfaces)", show_lines=True)
    for col in ("prompt", "surfaces", "inverted layer", "wall on top-8 surfaces"):
        table.add_column(col, overflow="fold")
    counts = {k: 0 for k in edits}
    kls = {k: 0.0 for k in edits}
    console.print(f"edits on layer {layer}: {len(DEMO_PROMPTS)} prompts x {len(edits)} edits")
    with progress(len(DEMO_PROMPTS), "edits", unit="prompt") as step:
        for p in DEMO_PROMPTS:
            _edit_row(model, tok, ivs, bank, p, edits, max_new_tokens, table, counts, kls)
            step()
    console.print(table)
    for name in edits:
        console.print(f"{name}: greedy changed {counts[name]}/{len(DEMO_PROMPTS)}, mean next-token KL {kls[name]:.4f}")
    # report: surface terrains/heatmaps with the first prompt's token self-pairs
    out_dir.mkdir(parents=True, exist_ok=True)
    picks = S.default_picks(bank, 4)
    layers = sorted({lay for lay, _, _ in picks})
    with steer(model, *ivs):
        labels, qs, ks = S.record_qk_tensors(model, tok, DEMO_PROMPTS[0], layers)
    qk = write_records(out_dir / "qk.json", S.qk_rows(labels, qs, ks, picks),
                       {"kind": "qk-points", "prompt": DEMO_PROMPTS[0], "surfaces": str(Path(surfaces).resolve()),
                        "tokens": labels})
    sens_file = write_records(out_dir / "layer_sensitivity.json", sens, {"prompts": DEMO_PROMPTS})
    rep = build_report([surfaces, qk, sens_file], out_dir / "report.html", title="geosteer demo")
    console.print(f"HTML report: {rep['out']} ({rep['figures']} figures)")
    return {"sensitive_layer": layer, "invert_changed": counts["invert"], "wall_changed": counts["wall"],
            "invert_mean_kl": kls["invert"], "wall_mean_kl": kls["wall"], "report": rep["out"]}


def _edit_row(model, tok, ivs: list, bank, p: str, edits: dict, max_new_tokens: int, table, counts: dict,
              kls: dict) -> None:
    """One prompt: the surfaces' continuation, then each edit's (live), its greedy change and next-token KL."""

    with steer(model, *ivs):
        base = generate(model, tok, p, max_new_tokens)
    lp_base = next_token_logprobs(model, tok, p, ivs)
    cells = [p, base.text.strip()]
    for name, e in edits.items():
        with live(bank, e):
            with steer(model, *ivs):
                g = generate(model, tok, p, max_new_tokens)
            lp = next_token_logprobs(model, tok, p, ivs)
        counts[name] += g.token_ids != base.token_ids
        kls[name] += kl_divergence(lp_base, lp) / len(DEMO_PROMPTS)
        cells.append(g.text.strip())
    table.add_row(*cells)
