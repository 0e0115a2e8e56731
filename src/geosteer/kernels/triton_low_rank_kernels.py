"""Triton kernel of the rank-r modulated attention (wrapper in ``geosteer.kernels.triton_low_rank``).

As ``triton_kernels`` with acc_s[i, s, d] = Σ_j p_ij v_jd (B(k_jd)·w_ds) (s < r) in place of acc_f, and
o_id = (acc_v + Σ_s (B(q_id)·u_ds) acc_s[i, s, d]) / l_i: r + 1 slices instead of K + 1.
"""

from __future__ import annotations

import triton
import triton.language as tl

from geosteer.kernels.triton_kernels import (
    _block_setup,
    _key_band,
    _masked_scores,
    _merge_partials,
    _online_softmax,
    _spline,
    _store_partials,
)


@triton.jit
def _take(base, a, ok, K: tl.constexpr, R: tl.constexpr):
    """Factor entries F[d, a, s] (zero where the basis index a is outside 0 … K-1)."""
    return tl.load(base + a * R, mask=ok & (a >= 0) & (a < K), other=0.0)


@triton.jit
def _project(Fh, x, dv, sc, off, G: tl.constexpr, K: tl.constexpr, R: tl.constexpr, RB: tl.constexpr,
             D: tl.constexpr):
    """(n, RB, DV): B(x_nd)·F[d, :, s] for rows x (n, DV) and one head's factor F (D, K, R); zero for s ≥ R."""
    a0, w0, w1, w2, w3 = _spline(x, sc, off, G)
    s = tl.arange(0, RB)[None, :, None]
    dd = dv[None, None, :]
    base = Fh + dd * (K * R) + s
    ok = (s < R) & (dd < D)
    a = a0[:, None, :]
    out = w0[:, None, :] * _take(base, a, ok, K, R)
    out += w1[:, None, :] * _take(base, a + 1, ok, K, R)
    out += w2[:, None, :] * _take(base, a + 2, ok, K, R)
    out += w3[:, None, :] * _take(base, a + 3, ok, K, R)
    return out


@triton.jit
def _attend_narrow(Kp, V, Wh, Mk, b, h, hk, i, dv, q_full, j0, j1, L, offset, scale, softcap, sc, off, window,
                   skb, skh, skj, svb, svh, svj, smb, smh, smi, smj,
                   G: tl.constexpr, K: tl.constexpr, R: tl.constexpr, RB: tl.constexpr, CAUSAL: tl.constexpr,
                   MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DV: tl.constexpr, D: tl.constexpr):
    """Online-softmax accumulators (m, l, acc_v, acc_s) of queries i over the keys [j0, j1)."""
    dfull = tl.arange(0, BLOCK_D)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc_v = tl.zeros((BLOCK_M, DV), tl.float32)
    acc_s = tl.zeros((BLOCK_M, RB * DV), tl.float32)
    for start in range(j0, j1, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        jin = j < j1
        kt = tl.load(Kp + b * skb + hk * skh + j[:, None] * skj + dfull[None, :],
                     mask=jin[:, None] & (dfull[None, :] < D), other=0.0).to(tl.float32)
        s = _masked_scores(q_full, kt, Mk, b, h, i, j, jin, L, offset, scale, softcap, window, smb, smh, smi, smj,
                           CAUSAL, MASK_KIND, SOFTCAP, WINDOW)
        m_new, alpha, p, l_i = _online_softmax(s, m_i, l_i)
        dmask = jin[:, None] & (dv[None, :] < D)
        vc = tl.load(V + b * svb + hk * svh + j[:, None] * svj + dv[None, :], mask=dmask, other=0.0).to(tl.float32)
        kc = tl.load(Kp + b * skb + hk * skh + j[:, None] * skj + dv[None, :], mask=dmask, other=0.0).to(tl.float32)
        acc_v = acc_v * alpha[:, None] + tl.dot(p, vc, input_precision="ieee")
        f = tl.reshape(_project(Wh, kc, dv, sc, off, G, K, R, RB, D) * vc[:, None, :], (BLOCK_N, RB * DV))
        acc_s = acc_s * alpha[:, None] + tl.dot(p, f, input_precision="ieee")
        m_i = m_new
    return m_i, l_i, acc_v, acc_s


@triton.jit
def _finish_narrow(Uf, Out, b, h, i, dv, l_i, acc_v, acc_s, qc, sc, off, L, sob, soi, soh, G: tl.constexpr,
                   K: tl.constexpr, R: tl.constexpr, RB: tl.constexpr, WITH_VALUE: tl.constexpr,
                   BLOCK_M: tl.constexpr, DV: tl.constexpr, D: tl.constexpr):
    """Epilogue: add Σ_s (B(q)·u_s) acc_s (4 non-zero query bases), normalise by l, store."""
    uq = _project(Uf + h * (D * K * R), qc, dv, sc, off, G, K, R, RB, D)  # (BLOCK_M, RB, DV)
    out = tl.sum(uq * tl.reshape(acc_s, (BLOCK_M, RB, DV)), 1)
    if WITH_VALUE:
        out += acc_v
    seen = l_i > 0
    out = tl.where(seen[:, None], out / tl.where(seen, l_i, 1.0)[:, None], 0.0)
    tl.store(Out + b * sob + i[:, None] * soi + h * soh + dv[None, :], out,
             mask=(i[:, None] < L) & (dv[None, :] < D))


@triton.jit
def _fwd_narrow(Q, Kp, V, Uf, Wf, Mk, Out, L, T, H, REP, offset, scale, softcap, sc, off, window,
                sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, smb, smh, smi, smj, sob, soi, soh,
                G: tl.constexpr, K: tl.constexpr, R: tl.constexpr, RB: tl.constexpr, CAUSAL: tl.constexpr,
                MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, WITH_VALUE: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DV: tl.constexpr,
                D: tl.constexpr):
    """Rank-r forward: grid (query blocks, b·H, value-dim chunks); U, W fp32 (H, D, K, R) contiguous."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    dvc = tl.program_id(2)
    b = bh // H
    h = bh % H
    hk = h // REP
    i, dv, q_full, qc = _block_setup(Q, b, h, pid_m, dvc, sqb, sqh, sqi, L, BLOCK_M, BLOCK_D, DV, D)
    j0, j1 = _key_band(pid_m, L, T, offset, window, CAUSAL, WINDOW, BLOCK_M, BLOCK_N)
    m_i, l_i, acc_v, acc_s = _attend_narrow(Kp, V, Wf + h * (D * K * R), Mk, b, h, hk, i, dv, q_full, j0, j1, L,
                                            offset, scale, softcap, sc, off, window, skb, skh, skj, svb, svh, svj,
                                            smb, smh, smi, smj, G, K, R, RB, CAUSAL, MASK_KIND, SOFTCAP, WINDOW,
                                            BLOCK_M, BLOCK_N, BLOCK_D, DV, D)
    _finish_narrow(Uf, Out, b, h, i, dv, l_i, acc_v, acc_s, qc, sc, off, L, sob, soi, soh, G, K, R, RB, WITH_VALUE,
                   BLOCK_M, DV, D)


@triton.jit
def _partial_narrow(Q, Kp, V, Wf, Mk, Pm, Pl, Pv, Ps, L, T, H, REP, N_DV, CHUNK, LP, offset, scale, softcap, sc,
                    off, window, sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, smb, smh, smi, smj,
                    G: tl.constexpr, K: tl.constexpr, R: tl.constexpr, RB: tl.constexpr, CAUSAL: tl.constexpr,
                    MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DV: tl.constexpr, D: tl.constexpr):
    """Split-K decode, part 1: accumulators of one key chunk. Grid (query blocks, b·H, splits·chunks)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    split = tl.program_id(2) // N_DV
    dvc = tl.program_id(2) % N_DV
    b = bh // H
    h = bh % H
    i, dv, q_full, qc = _block_setup(Q, b, h, pid_m, dvc, sqb, sqh, sqi, L, BLOCK_M, BLOCK_D, DV, D)
    j0, j1 = _key_band(pid_m, L, T, offset, window, CAUSAL, WINDOW, BLOCK_M, BLOCK_N)
    j0 = tl.maximum(j0, split * CHUNK)
    j1 = tl.minimum(j1, (split + 1) * CHUNK)
    m_i, l_i, acc_v, acc_s = _attend_narrow(Kp, V, Wf + h * (D * K * R), Mk, b, h, h // REP, i, dv, q_full, j0, j1,
                                            L, offset, scale, softcap, sc, off, window, skb, skh, skj, svb, svh,
                                            svj, smb, smh, smi, smj, G, K, R, RB, CAUSAL, MASK_KIND, SOFTCAP,
                                            WINDOW, BLOCK_M, BLOCK_N, BLOCK_D, DV, D)
    row = (split * tl.num_programs(1) + bh) * LP + i  # (split, bh, i) in a (S, BH, LP) layout
    _store_partials(Pm, Pl, Pv, Ps, row, dv, m_i, l_i, acc_v, acc_s, N_DV, RB, BLOCK_M, DV)


@triton.jit
def _combine_narrow(Q, Uf, Pm, Pl, Pv, Ps, Out, L, H, N_SPLIT, N_DV, LP, sc, off, sqb, sqh, sqi, sob, soi, soh,
                    G: tl.constexpr, K: tl.constexpr, R: tl.constexpr, RB: tl.constexpr, WITH_VALUE: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, DV: tl.constexpr, D: tl.constexpr):
    """Split-K decode, part 2: merge the chunks' accumulators, then the epilogue. Grid (blocks, b·H, chunks)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    dvc = tl.program_id(2)
    b = bh // H
    h = bh % H
    i, dv, q_full, qc = _block_setup(Q, b, h, pid_m, dvc, sqb, sqh, sqi, L, BLOCK_M, BLOCK_D, DV, D)
    _, l_i, acc_v, acc_s = _merge_partials(Pm, Pl, Pv, Ps, bh, i, dv, N_SPLIT, N_DV, LP, RB, BLOCK_M, DV)
    _finish_narrow(Uf, Out, b, h, i, dv, l_i, acc_v, acc_s, qc, sc, off, L, sob, soi, soh, G, K, R, RB, WITH_VALUE,
                   BLOCK_M, DV, D)
