"""The paper studies and formula checks of directional decomposition: ``geosteer study directional ...``,
``geosteer study checks``."""

from __future__ import annotations

from geosteer.models.tiny import TINY_FAMILIES
from geosteer_paper.registry import Check, Study, register_paper


def _study(name: str, module: str, function: str, paper: str) -> Study:
    return Study(name, f"geosteer_paper.directional.studies.{module}:{function}", paper)


STUDIES = (
    _study("sweep", "sweep", "sweep_cmd", "Fig. 3: perplexity vs s∥ and s⊥ per site"),
    _study("pretrain", "pretrain", "pretrain_cmd", "Fig. 5, Table 3, Fig. 8: pretraining with the edit active"),
    _study("diagonal", "views", "diagonal_cmd", "Eq. 12, Table 5, Fig. 4: diagonal forms and maps"),
    _study("heads", "views", "heads_cmd", "Fig. 7: head localisation"),
    _study("strength", "views", "strength_cmd", "Table 6: applied strength"),
    _study("mlp-internal", "views", "mlp_internal_cmd", "App. D, Table 10: MLP-internal sites"),
    _study("plot", "views", "plot_cmd", "Figs 4 / 7 redrawn from a result file"),
)

_CHECKS = "geosteer_paper.directional.checks"
_ALL = tuple(TINY_FAMILIES)
CHECKS = (
    Check("3.1", "projection onto z vs numpy least squares", f"{_CHECKS}:projection_vs_numpy", 1e-10),
    Check("3.2", "scaled attention update vs plain torch hooks", f"{_CHECKS}:residual_update_vs_plain_hooks",
          1e-5, _ALL),
    Check("3.5", "per-head value edit vs a per-token loop", f"{_CHECKS}:value_full_vs_loop", 2e-5, _ALL),
    Check("3.6", "exclude-self edit vs a per-token loop", f"{_CHECKS}:exclude_self_vs_loop", 2e-5, _ALL),
    Check("3.6", "self weight a_tt vs the materialised diagonal", f"{_CHECKS}:self_weight_vs_diagonal", 1e-6,
          _ALL),
    Check("3.7", "s∥ = s⊥ = 1 on every site vs stock logits", f"{_CHECKS}:neutral_vs_stock", 0.0, _ALL),
    Check("3.8", "diagonal form A + diag(ΔA) vs the edited output", f"{_CHECKS}:diagonal_form_vs_edit", 1e-5,
          _ALL),
)

register_paper("directional", STUDIES, CHECKS)
