"""Attention kernels of the surfaces: the computations, not the interventions that use them.

- ``bspline``: the uniform cubic B-spline basis (dense and local forms).
- ``feature_cache``: key-side features cached across KV-cache decoding steps.
- ``ext``: the compiled CPU kernels (C++ sources in ``csrc/``, built on first use; ``python -m geosteer.kernels.ext``
  builds them now).
"""
