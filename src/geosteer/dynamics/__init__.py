"""FFN steering field: residual dynamics on the sphere (diagnostics, FFN variants, gains, gates, parallel).

    rows = diagnose(model, ids)                                       # per-layer diagnostics
    with geosteer.steer(model, FFNVariant("tangential", layers=[3])):  # keep Φ's tangential part
"""

from geosteer.dynamics.diagnostics import DiagnosticsCollector, diagnose
from geosteer.dynamics.gates import FFNGates, load_gates, train_gates
from geosteer.dynamics.method import METHOD
from geosteer.dynamics.parallel import ConcurrentParallel, mean_loss
from geosteer.dynamics.topk import TopKAttention
from geosteer.dynamics.variants import FFNVariant, Gains, Parallelize

__all__ = ["METHOD", "ConcurrentParallel", "DiagnosticsCollector", "FFNGates", "FFNVariant", "Gains",
           "Parallelize", "TopKAttention", "diagnose", "load_gates", "mean_loss", "train_gates"]
