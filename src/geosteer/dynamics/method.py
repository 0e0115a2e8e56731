"""What the FFN-steering-field method adds (registered on import of ``geosteer.dynamics``)."""

from __future__ import annotations

from geosteer.dynamics.gates import GATES
from geosteer.methods import Check, Method, RecipeKey, Study, register_method
from geosteer.models.tiny import TINY_FAMILIES


def _validate(v: dict) -> None:
    from geosteer.dynamics.config import check_variant

    check_variant(v["mlp_variant"])


def _build(model, v: dict, *, force: bool = False) -> list:
    """FFN variant, gates, gains, parallel layers: in this order. ``force``: gates recorded for another
    base model are used anyway."""
    from geosteer.models.anatomy import anatomy, parse_layers

    n = anatomy(model).n_layers
    out: list = []
    if v["mlp_variant"] != "full":
        from geosteer.dynamics.variants import FFNVariant

        out.append(FFNVariant(v["mlp_variant"], parse_layers(v["mlp_layers"], n)))
    if v["gates"] is not None:
        from geosteer.dynamics.gates import load_gates

        out.append(load_gates(v["gates"], model, force=force))
    if v["beta_attn"] != 1.0 or v["alpha_mlp"] != 1.0:
        from geosteer.dynamics.variants import Gains

        out.append(Gains(v["beta_attn"], v["alpha_mlp"], parse_layers(v["gain_layers"], n)))
    if v["parallel_layers"] is not None:
        from geosteer.dynamics.variants import Parallelize

        out.append(Parallelize(parse_layers(v["parallel_layers"], n) or list(range(n))))
    return out


def _study(name: str, module: str, function: str, paper: str) -> Study:
    return Study(name, f"geosteer.dynamics.studies.{module}:{function}", paper)


STUDIES = (
    _study("critical", "geometry", "critical", "Tables 2 / 6, Fig. 10: A/S/R counts of critical candidates"),
    _study("commutator", "geometry", "commutator", "Prop. 2, Fig. 8 right, App. B: commutator vs reordering"),
    _study("pressure", "geometry", "pressure", "experiment iii: diversity under aggregation pressure"),
    _study("gain-depth", "geometry", "gain_depth", "App. C.1, Fig. 8 left: FFN gain at one depth"),
    _study("split-options", "geometry", "split_options", "Fig. 3: FFN ablation under each split reference"),
    _study("ablate", "ablation", "ablate", "Fig. 3: FFN ablation (full / zero / radial / tangential)"),
    _study("gains", "ablation", "gains", "Table 3: gain corridor (β_A, α_F) around (1, 1)"),
    _study("parallelize", "parallel", "parallelize", "Figs 5 / 6 / 16: defect-guided parallelisation"),
    _study("prefix-spread", "prefix", "prefix_spread", "App. C.5: prefix (Volterra) sensitivity"),
    _study("anchors", "prefix", "anchors", "App. C.5: anchor tokens"),
    _study("edit-specificity", "prefix", "edit_specificity", "Fig. 13: editing specificity"),
    _study("edit-linearity", "prefix", "edit_linearity", "Fig. 13: edit transfer is nearly linear"),
    _study("edit-locality", "prefix", "edit_locality", "editing locality vs query/key edits"),
    Study("edit-protocol", "geosteer.dynamics.studies.edit_protocol:edit_protocol",
          "App. C: n = 32 value-neuron edits, s = 0.5…8, equal-norm baselines, channel ablation"),
    _study("continuation", "continuation", "continuation", "Thm 3, Fig. 11: α continuation"),
    _study("basins", "continuation", "basins", "Fig. 12: basin maps at α = 0 vs 1"),
    _study("phase", "continuation", "phase", "Fig. 9: phase reconstruction"),
    _study("theory", "theory", "theory", "Thm 3, Eq. (9), Eq. (11): first-order branch, J* split, region bound"),
    _study("mean-field", "meanfield", "mean_field", "Thm 2: W1 of L-particle measures to the mean-field limit"),
    _study("finetune-baselines", "finetune", "finetune_baselines",
           "limitation: FFN gates vs bias-only and LoRA fine-tuning on the same tokens"),
    _study("significance", "significance", "significance", "cross-model rows: bootstrap interval, permutation p"),
    Study("ov-spectrum", "geosteer.dynamics.studies.ov:ov_spectrum",
          "Fig. 14, App. C.6: OV non-symmetry, dominant eigenvalue by modulus and by real part"),
)

_CHECKS = "geosteer.dynamics.checks"
CHECKS = (
    Check("2.1", "P_u and the radial/tangential split vs numpy projectors", f"{_CHECKS}:sphere_split_vs_numpy",
          1e-12),
    Check("2.3", "tangent Jacobian (OV, FFN, full; layer 1) vs central finite differences",
          f"{_CHECKS}:tangent_jacobian_vs_finite_differences", 1e-6, tuple(TINY_FAMILIES)),
    Check("2.15", "estimated speed-up (T_par = max(T_A, T_Φ)) vs an explicit loop",
          f"{_CHECKS}:parallel_speedup_vs_loop", 1e-12),
)


def _examples(model, folder) -> dict:
    """For the contract suite: gates of 1 and unit gains (the stock model), then gates and gains that differ."""
    import torch

    from geosteer.dynamics.gates import FFNGates

    neutral = FFNGates.for_model(model).save(folder / "gates-neutral")
    gates = FFNGates.for_model(model)
    with torch.no_grad():
        gates.alpha.copy_(torch.linspace(0.5, 1.5, gates.alpha.numel()))
    return {"neutral": {"gates": str(neutral), "beta_attn": 1.0, "alpha_mlp": 1.0},
            "active": {"gates": str(gates.save(folder / "gates")), "beta_attn": 0.8}}


METHOD = register_method(Method(
    name="dynamics",
    summary="FFN steering field: residual dynamics on the sphere",
    keys=(
        RecipeKey("mlp_variant", "full", "MLP (FFN) variant: full | zero | radial | tangential | attn_zero",
                  kind="text"),
        RecipeKey("mlp_layers", None, "layers of the variant", kind="layers"),
        RecipeKey("gates", None, "FFN gate artifact folder", kind="folder"),
        RecipeKey("beta_attn", 1.0, "attention branch gain (App. C.1 Eq. 24)", kind="number"),
        RecipeKey("alpha_mlp", 1.0, "MLP (FFN) branch gain α_F", kind="number"),
        RecipeKey("gain_layers", None, "layers of the gains", kind="layers"),
        RecipeKey("parallel_layers", None, "layers replaced by the parallel surrogate (Eq. 22)", kind="layers"),
    ),
    build=_build,
    examples=_examples,
    validate=_validate,
    cli="geosteer.dynamics.cli_register",
    artifacts=(GATES,),
    studies=STUDIES,
    checks=CHECKS,
))
