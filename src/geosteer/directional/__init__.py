"""Directional decomposition: updates split parallel / perpendicular to the residual stream.

    rows, meta = measure_text(model, tok, text)                       # per-layer ∥/⊥ statistics
    with geosteer.steer(model, ComponentScale("attn_out", s_par=0.0)):  # remove the parallel part
"""

from geosteer.directional.config import SITES, ComponentScaleConfig, check_site
from geosteer.directional.decompose import component_scale, decompose
from geosteer.directional.measure import DirectionalMeasure, measure_generation, measure_text
from geosteer.directional.method import METHOD
from geosteer.directional.sites import ComponentScale
from geosteer.directional.steer_learn import ScaleLearnConfig, learn_scales

__all__ = ["METHOD", "SITES", "ComponentScale", "ComponentScaleConfig", "DirectionalMeasure", "ScaleLearnConfig",
           "check_site", "component_scale", "decompose", "learn_scales", "measure_generation", "measure_text"]
