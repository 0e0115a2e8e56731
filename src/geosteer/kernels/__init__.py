"""The attention kernels of value-modulated attention (the surfaces): computations, not interventions.

o_id = Σ_j a_ij v_jd (1 + S_d(q_id, k_jd)), S_d(q, k) = Σ_ab C_dab B_a(q) B_b(k) (paper Eq. 2), never as a
(b, h, q, k, d) tensor. ``exact`` (factored kernel, backend choice, per-pair reference), ``low_rank`` (rank-r
surfaces), ``sdpa`` (stock weights by block), ``triton*`` (fused GPU kernels), ``ext`` (compiled CPU
kernels), ``feature_cache``, ``bspline``. Nothing here imports the methods, attention or serving.
"""
