"""The attention kernels of value-modulated attention (the surfaces): computations, not interventions.

o_id = Σ_j a_ij v_jd (1 + S_d(q_id, k_jd)) with S_d(q, k) = Σ_ab C_dab B_a(q) B_b(k), computed without the
(b, h, q, k, d) tensor. Interventions (``geosteer.manifold``), the attention function (``geosteer.attention``)
and serving (``geosteer.serve``) call these; nothing here imports them.

- ``exact``: the exact factored kernel ``modulated_attention`` (PyTorch ops and the compiled CPU kernels), the
  key features, the backend choice (``GEOSTEER_MANIFOLD_BACKEND``), the per-pair reference.
- ``low_rank``: the r + 1-slice kernel of rank-r surfaces C = U Wᵀ (compiled flash-style attention on the CPU).
- ``sdpa``: the stock attention weights block by block (masks, scaling, soft-capping, GQA), shared by the kernels.
- ``triton``, ``triton_kernels``, ``triton_backward``: the fused GPU kernels (forward, split-K decode, backward);
  ``triton_low_rank``, ``triton_low_rank_kernels``: the rank-r forward.
- ``ext``: the compiled CPU kernels (C++ sources in ``csrc/``, built on first use or by
  ``python -m geosteer.kernels.ext``; ``GEOSTEER_NO_EXT=1`` turns them off).
- ``feature_cache``: key-side features kept across KV-cache decoding steps.
- ``bspline``: the uniform cubic B-spline basis (dense and local forms).
"""
