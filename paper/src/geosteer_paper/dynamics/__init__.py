"""The paper studies and formula checks of the FFN steering field: ``geosteer study dynamics ...``,
``geosteer study checks``."""

from __future__ import annotations

from geosteer.models.tiny import TINY_FAMILIES
from geosteer_paper.registry import Check, Study, register_paper


def _study(name: str, module: str, function: str, paper: str) -> Study:
    return Study(name, f"geosteer_paper.dynamics.studies.{module}:{function}", paper)


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
    Study("edit-protocol", "geosteer_paper.dynamics.studies.edit_protocol:edit_protocol",
          "App. C: n = 32 value-neuron edits, s = 0.5…8, equal-norm baselines, channel ablation"),
    _study("continuation", "continuation", "continuation", "Thm 3, Fig. 11: α continuation"),
    _study("basins", "continuation", "basins", "Fig. 12: basin maps at α = 0 vs 1"),
    _study("phase", "continuation", "phase", "Fig. 9: phase reconstruction"),
    _study("theory", "theory", "theory", "Thm 3, Eq. (9), Eq. (11): first-order branch, J* split, region bound"),
    _study("mean-field", "meanfield", "mean_field", "Thm 2: W1 of L-particle measures to the mean-field limit"),
    _study("finetune-baselines", "finetune", "finetune_baselines",
           "limitation: FFN gates vs bias-only and LoRA fine-tuning on the same tokens"),
    _study("significance", "significance", "significance", "cross-model rows: bootstrap interval, permutation p"),
    Study("ov-spectrum", "geosteer_paper.dynamics.studies.ov:ov_spectrum",
          "Fig. 14, App. C.6: OV non-symmetry, dominant eigenvalue by modulus and by real part"),
)

_CHECKS = "geosteer_paper.dynamics.checks"
CHECKS = (
    Check("2.1", "P_u and the radial/tangential split vs numpy projectors", f"{_CHECKS}:sphere_split_vs_numpy",
          1e-12),
    Check("2.3", "tangent Jacobian (OV, FFN, full; layer 1) vs central finite differences",
          f"{_CHECKS}:tangent_jacobian_vs_finite_differences", 1e-6, tuple(TINY_FAMILIES)),
    Check("2.15", "estimated speed-up (T_par = max(T_A, T_Φ)) vs an explicit loop",
          f"{_CHECKS}:parallel_speedup_vs_loop", 1e-12),
)

register_paper("dynamics", STUDIES, CHECKS)
