"""Triton kernels of the modulated attention's backward (flash-style; p_ij recomputed from the row lse).

With g = ∂L/∂o, Gq[i, b, d] = g_id Σ_a B_a(q_id) C_dab and W[j, b, d] = v_jd B_b(k_jd):

    dp_ij = g_i·v_j + Σ_bd Gq_ibd W_jbd,   ds_ij = p_ij (dp_ij − g_i·o_i)   (times the soft-cap slope)
    dq_i  = s Σ_j ds_ij k_j + g_i ⊙ Σ_a B'_a(q_i) Σ_b C_ab F_ib,   F_ib = Σ_j p_ij W_jb
    dC_dab = Σ_i g_id B_a(q_id) F_ibd
    dk_j  = s Σ_i ds_ij q_i + v_j ⊙ Σ_b B'_b(k_j) H_jb,            H_jb = Σ_i p_ij Gq_ib
    dv_j  = Σ_i p_ij g_i + Σ_b B_b(k_j) H_jb

``_bwd_dq``: a query block (dC added atomically); ``_bwd_dkdv``: a key block over its n_rep query heads.
"""

from __future__ import annotations

import triton
import triton.language as tl

from geosteer.kernels.triton_kernels import _apply_mask, _gather, _key_band, _onehot, _row, _scores, _spline, _widened


@triton.jit
def _spline_slope(x, sc, off, G: tl.constexpr):
    """First basis index and the 4 derivatives d/dx of the weights (zero where the position is clamped)."""
    u = x * sc + off
    inside = (u >= 0.0) & (u <= G + 6.0)
    u = tl.minimum(tl.maximum(u, 0.0), G + 6.0)
    s = tl.floor(u)
    t = u - s
    m = 1.0 - t
    f = tl.where(inside, sc, 0.0)
    d0 = -0.5 * m * m * f
    d3 = 0.5 * t * t * f
    d1 = (1.5 * t * t - 2.0 * t) * f
    d2 = -(d0 + d1 + d3)
    return s.to(tl.int32) - 3, d0, d1, d2, d3


@triton.jit
def _query_grad_widened(q, g, cbase, bok, sc, off, G: tl.constexpr, K: tl.constexpr, KB: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """Gq (BLOCK_M, KB·BLOCK_D): g_id Σ_a B_a(q_id) C_dab, from the 4 non-zero query bases."""
    a0, w0, w1, w2, w3 = _spline(q, sc, off, G)
    gq = w0[:, None, :] * _gather(cbase, a0, bok, K)
    gq += w1[:, None, :] * _gather(cbase, a0 + 1, bok, K)
    gq += w2[:, None, :] * _gather(cbase, a0 + 2, bok, K)
    gq += w3[:, None, :] * _gather(cbase, a0 + 3, bok, K)
    return tl.reshape(g[:, None, :] * gq, (BLOCK_M, KB * BLOCK_D))


@triton.jit
def _weights(q, kt, i, j, jin, lse, Mk, b, h, L, offset, scale, softcap, window, smb, smh, smi, smj,
             CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    """(p, soft-cap slope) of a (queries, keys) tile, recomputed as the forward made the scores."""
    s = _scores(q, kt, scale, softcap, SOFTCAP)
    slope = tl.full(s.shape, 1.0, tl.float32)
    if SOFTCAP:
        slope = 1.0 - (s / softcap) * (s / softcap)
    s = _apply_mask(s, Mk, b, h, i, j, jin, L, offset, window, smb, smh, smi, smj, CAUSAL, MASK_KIND, WINDOW)
    return tl.exp(s - lse[:, None]), slope


@triton.jit
def _load_rows(Q, Gr, O, Lse, b, h, i, d, L, H, sqb, sqh, sqi, sgb, sgi, sgh, sob, soi, soh, D: tl.constexpr):
    """q, g, the row term g·o and the lse (−inf → 0: such rows have no visible key) of queries i."""
    ok = (i[:, None] < L) & (d[None, :] < D)
    q = tl.load(Q + b * sqb + h * sqh + i[:, None] * sqi + d[None, :], mask=ok, other=0.0).to(tl.float32)
    g = tl.load(Gr + b * sgb + i[:, None] * sgi + h * sgh + d[None, :], mask=ok, other=0.0).to(tl.float32)
    o = tl.load(O + b * sob + i[:, None] * soi + h * soh + d[None, :], mask=ok, other=0.0)
    lse = tl.load(Lse + (b * H + h) * L + i, mask=i < L, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse)
    return q, g, tl.sum(g * o, 1), lse


@triton.jit
def _bwd_dq(Q, Kp, V, Cf, Mk, Gr, O, Lse, OutQ, OutC, L, T, H, REP, offset, scale, softcap, sc, off, window,
            sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, smb, smh, smi, smj, sgb, sgi, sgh, sob, soi, soh,
            G: tl.constexpr, K: tl.constexpr, KB: tl.constexpr, HAS_SURF: tl.constexpr, CAUSAL: tl.constexpr,
            MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, WITH_VALUE: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D: tl.constexpr):
    """dq of a query block and its share of dC. Grid (query blocks, b·H)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // REP
    i = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    q, g, delta, lse = _load_rows(Q, Gr, O, Lse, b, h, i, d, L, H, sqb, sqh, sqi, sgb, sgi, sgh, sob, soi, soh, D)
    cb = tl.arange(0, KB)[None, :, None]
    dd = d[None, None, :]
    cbase = Cf + h * (D * K * K) + dd * (K * K) + cb
    bok = (cb < K) & (dd < D)
    gq = tl.zeros((BLOCK_M, KB * BLOCK_D), tl.float32)
    if HAS_SURF:
        gq = _query_grad_widened(q, g, cbase, bok, sc, off, G, K, KB, BLOCK_M, BLOCK_D)
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    f = tl.zeros((BLOCK_M, KB * BLOCK_D), tl.float32)
    j0, j1 = _key_band(pid_m, L, T, offset, window, CAUSAL, WINDOW, BLOCK_M, BLOCK_N)
    for start in range(j0, j1, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        jin = j < j1
        kv_ok = jin[:, None] & (d[None, :] < D)
        kt = tl.load(Kp + b * skb + hk * skh + j[:, None] * skj + d[None, :], mask=kv_ok, other=0.0).to(tl.float32)
        vt = tl.load(V + b * svb + hk * svh + j[:, None] * svj + d[None, :], mask=kv_ok, other=0.0).to(tl.float32)
        p, slope = _weights(q, kt, i, j, jin, lse, Mk, b, h, L, offset, scale, softcap, window, smb, smh, smi, smj,
                            CAUSAL, MASK_KIND, SOFTCAP, WINDOW)
        dp = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        if WITH_VALUE:
            dp += tl.dot(g, tl.trans(vt), input_precision="ieee")
        if HAS_SURF:
            w = _widened(kt, vt, sc, off, G, K, KB, BLOCK_N, BLOCK_D)
            dp += tl.dot(gq, tl.trans(w), input_precision="ieee")
            f += tl.dot(p, w, input_precision="ieee")
        ds = p * (dp - delta[:, None]) * slope
        dq += tl.dot(ds, kt, input_precision="ieee")
    dq = dq * scale
    if HAS_SURF:
        f3 = tl.reshape(f, (BLOCK_M, KB, BLOCK_D))
        a0, e0, e1, e2, e3 = _spline_slope(q, sc, off, G)
        dq += g * (e0 * _row(cbase, a0, bok, f3, K) + e1 * _row(cbase, a0 + 1, bok, f3, K)
                   + e2 * _row(cbase, a0 + 2, bok, f3, K) + e3 * _row(cbase, a0 + 3, bok, f3, K))
        a0, w0, w1, w2, w3 = _spline(q, sc, off, G)
        qa = g[:, None, :] * _onehot(a0, w0, w1, w2, w3, K, KB)  # (BLOCK_M, KB, BLOCK_D)
        m = tl.dot(tl.permute(qa, (2, 1, 0)), tl.permute(f3, (2, 0, 1)), input_precision="ieee")  # (d, a, b)
        d3 = tl.arange(0, BLOCK_D)[:, None, None]
        a3 = tl.arange(0, KB)[None, :, None]
        b3 = tl.arange(0, KB)[None, None, :]
        tl.atomic_add(OutC + h * (D * K * K) + d3 * (K * K) + a3 * K + b3, m, mask=(d3 < D) & (a3 < K) & (b3 < K))
    tl.store(OutQ + (bh * L + i[:, None]) * D + d[None, :], dq, mask=(i[:, None] < L) & (d[None, :] < D))


@triton.jit
def _bwd_dkdv(Q, Kp, V, Cf, Mk, Gr, O, Lse, OutK, OutV, L, T, H, REP, offset, scale, softcap, sc, off, window,
              sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, smb, smh, smi, smj, sgb, sgi, sgh, sob, soi, soh,
              G: tl.constexpr, K: tl.constexpr, KB: tl.constexpr, HAS_SURF: tl.constexpr, CAUSAL: tl.constexpr,
              MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, WITH_VALUE: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D: tl.constexpr):
    """dk, dv of a key block over the n_rep query heads that read its KV head. Grid (key blocks, b·Hkv)."""
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1)
    hkv = H // REP
    b = bhk // hkv
    hk = bhk % hkv
    j = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, BLOCK_D)
    jin = j < T
    kv_ok = jin[:, None] & (d[None, :] < D)
    kt = tl.load(Kp + b * skb + hk * skh + j[:, None] * skj + d[None, :], mask=kv_ok, other=0.0).to(tl.float32)
    vt = tl.load(V + b * svb + hk * svh + j[:, None] * svj + d[None, :], mask=kv_ok, other=0.0).to(tl.float32)
    w = tl.zeros((BLOCK_N, KB * BLOCK_D), tl.float32)
    if HAS_SURF:
        w = _widened(kt, vt, sc, off, G, K, KB, BLOCK_N, BLOCK_D)
    cb = tl.arange(0, KB)[None, :, None]
    dd = d[None, None, :]
    bok = (cb < K) & (dd < D)
    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    hacc = tl.zeros((BLOCK_N, KB * BLOCK_D), tl.float32)
    i0 = 0
    i1 = L
    if CAUSAL:  # queries i see keys j ≤ i + offset (and j > i + offset − window)
        i0 = tl.maximum(0, pid_n * BLOCK_N - offset)
        i0 = (i0 // BLOCK_M) * BLOCK_M
        if WINDOW:
            i1 = tl.minimum(L, pid_n * BLOCK_N + BLOCK_N - 1 - offset + window)
    for r in range(0, REP):
        h = hk * REP + r
        cbase = Cf + h * (D * K * K) + dd * (K * K) + cb
        for start in range(i0, i1, BLOCK_M):
            i = start + tl.arange(0, BLOCK_M)
            q, g, delta, lse = _load_rows(Q, Gr, O, Lse, b, h, i, d, L, H, sqb, sqh, sqi, sgb, sgi, sgh,
                                          sob, soi, soh, D)
            p, slope = _weights(q, kt, i, j, jin, lse, Mk, b, h, L, offset, scale, softcap, window,
                                smb, smh, smi, smj, CAUSAL, MASK_KIND, SOFTCAP, WINDOW)
            dp = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            if WITH_VALUE:
                dp += tl.dot(g, tl.trans(vt), input_precision="ieee")
                dv += tl.dot(tl.trans(p), g, input_precision="ieee")
            if HAS_SURF:
                gq = _query_grad_widened(q, g, cbase, bok, sc, off, G, K, KB, BLOCK_M, BLOCK_D)
                dp += tl.dot(gq, tl.trans(w), input_precision="ieee")
                hacc += tl.dot(tl.trans(p), gq, input_precision="ieee")
            ds = p * (dp - delta[:, None]) * slope
            dk += tl.dot(tl.trans(ds), q, input_precision="ieee")
    dk = dk * scale
    if HAS_SURF:
        h3 = tl.reshape(hacc, (BLOCK_N, KB, BLOCK_D))
        a0, w0, w1, w2, w3 = _spline(kt, sc, off, G)
        dv += tl.sum(_onehot(a0, w0, w1, w2, w3, K, KB) * h3, 1)
        a0, e0, e1, e2, e3 = _spline_slope(kt, sc, off, G)
        dk += vt * tl.sum(_onehot(a0, e0, e1, e2, e3, K, KB) * h3, 1)
    out = (bhk * T + j[:, None]) * D + d[None, :]
    tl.store(OutK + out, dk, mask=kv_ok)
    tl.store(OutV + out, dv, mask=kv_ok)
