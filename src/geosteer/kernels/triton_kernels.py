"""Triton kernels of the fused modulated attention (flash-style; wrappers in ``geosteer.kernels.triton``).

A program owns ``BLOCK_M`` queries of one head and ``DV`` value dims; over the visible key tiles it keeps,
with an online softmax, acc_v[i, d] = Σ_j p_ij v_jd and acc_f[i, c, d] = Σ_j p_ij v_jd B_c(k_jd) (the
widened value built on chip), then o_id = (acc_v + Σ_r B_{a_r}(q_id) Σ_b C_{d a_r b} acc_f[i, b, d]) / l_i and
the row lse. Decoding splits keys (``_partial``, ``_combine``). All fp32 (``input_precision="ieee"``);
``TRITON_INTERPRET=1`` runs them on CPU tensors.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton import knobs

INTERPRETED = bool(knobs.runtime.interpret)  # decided when the kernels were decorated (import time)


@triton.jit
def _spline(x, sc, off, G: tl.constexpr):
    """First basis index a0 = s − 3 and the 4 cubic B-spline weights at x (as ``exact._weights``)."""
    u = x * sc + off
    u = tl.minimum(tl.maximum(u, 0.0), G + 6.0)
    s = tl.floor(u)
    t = u - s
    t2 = t * t
    t3 = t2 * t
    m = 1.0 - t
    w0 = m * m * m * (1.0 / 6.0)
    w3 = t3 * (1.0 / 6.0)
    w1 = t3 * 0.5 - t2 + (2.0 / 3.0)
    w2 = 1.0 - w0 - w1 - w3
    return s.to(tl.int32) - 3, w0, w1, w2, w3


@triton.jit
def _onehot(a0, w0, w1, w2, w3, K: tl.constexpr, KB: tl.constexpr):
    """(rows, KB, cols): weight w_r at basis a0 + r, zero elsewhere and for bases ≥ K."""
    c = tl.arange(0, KB)[None, :, None]
    a = a0[:, None, :]
    out = tl.where(c == a, w0[:, None, :], 0.0)
    out += tl.where(c == a + 1, w1[:, None, :], 0.0)
    out += tl.where(c == a + 2, w2[:, None, :], 0.0)
    out += tl.where(c == a + 3, w3[:, None, :], 0.0)
    return tl.where(c < K, out, 0.0)


@triton.jit
def _widened(kc, vc, sc, off, G: tl.constexpr, K: tl.constexpr, KB: tl.constexpr, BLOCK_N: tl.constexpr,
             DV: tl.constexpr):
    """(BLOCK_N, KB·DV) tile: column c·DV + d holds v_jd·B_c(k_jd) (zero for c ≥ K)."""
    a0, w0, w1, w2, w3 = _spline(kc, sc, off, G)
    return tl.reshape(_onehot(a0, w0, w1, w2, w3, K, KB) * vc[:, None, :], (BLOCK_N, KB * DV))


@triton.jit
def _scores(q_full, kt, scale, softcap, SOFTCAP: tl.constexpr):
    """Scaled (soft-capped) scores of a (queries, keys) tile."""
    s = tl.dot(q_full, tl.trans(kt), input_precision="ieee") * scale
    if SOFTCAP:
        s = (2.0 * tl.sigmoid(2.0 * s / softcap) - 1.0) * softcap
    return s


@triton.jit
def _masked_scores(q_full, kt, Mk, b, h, i, j, jin, L, offset, scale, softcap, window, smb, smh, smi, smj,
                   CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    """:func:`_scores`, −inf where masked (causal, window, padding, boolean keep-mask) or outside the lengths;
    an additive mask is added."""
    return _apply_mask(_scores(q_full, kt, scale, softcap, SOFTCAP), Mk, b, h, i, j, jin, L, offset, window,
                       smb, smh, smi, smj, CAUSAL, MASK_KIND, WINDOW)


@triton.jit
def _apply_mask(s, Mk, b, h, i, j, jin, L, offset, window, smb, smh, smi, smj, CAUSAL: tl.constexpr,
                MASK_KIND: tl.constexpr, WINDOW: tl.constexpr):
    ok = jin[None, :] & (i[:, None] < L)
    if CAUSAL:
        ok = ok & (j[None, :] <= i[:, None] + offset)
        if WINDOW:
            ok = ok & (j[None, :] > i[:, None] + offset - window)
    if MASK_KIND == 1:
        mk = tl.load(Mk + b * smb + h * smh + i[:, None] * smi + j[None, :] * smj, mask=ok, other=0)
        ok = ok & (mk != 0)
    if MASK_KIND == 2:
        s += tl.load(Mk + b * smb + h * smh + i[:, None] * smi + j[None, :] * smj, mask=ok, other=0.0).to(tl.float32)
    return tl.where(ok, s, float("-inf"))


@triton.jit
def _online_softmax(s, m_i, l_i):
    """One online-softmax step: (new running max, rescale of the old accumulators, p, new running sum)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(s - m_safe[:, None])
    return m_new, alpha, p, l_i * alpha + tl.sum(p, 1)


@triton.jit
def _attend(Q, Kp, V, Mk, b, h, hk, i, dv, q_full, j0, j1, L, T, offset, scale, softcap, sc, off, window,
            sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, smb, smh, smi, smj,
            G: tl.constexpr, K: tl.constexpr, KB: tl.constexpr, HAS_SURF: tl.constexpr,
            CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DV: tl.constexpr,
            D: tl.constexpr):
    """Online-softmax accumulators (m, l, acc_v, acc_f) of queries i over the keys [j0, j1)."""
    dfull = tl.arange(0, BLOCK_D)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc_v = tl.zeros((BLOCK_M, DV), tl.float32)
    acc_f = tl.zeros((BLOCK_M, KB * DV), tl.float32)
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
        acc_v = acc_v * alpha[:, None] + tl.dot(p, vc, input_precision="ieee")
        if HAS_SURF:
            kc = tl.load(Kp + b * skb + hk * skh + j[:, None] * skj + dv[None, :], mask=dmask,
                         other=0.0).to(tl.float32)
            w = _widened(kc, vc, sc, off, G, K, KB, BLOCK_N, DV)
            acc_f = acc_f * alpha[:, None] + tl.dot(p, w, input_precision="ieee")
        m_i = m_new
    return m_i, l_i, acc_v, acc_f


@triton.jit
def _gather(base, a, bok, K: tl.constexpr):
    """C[d, a_id, b] as (rows, KB, cols); zero where a is outside 0 … K-1."""
    aok = (a >= 0) & (a < K)
    return tl.load(base + a[:, None, :] * K, mask=bok & aok[:, None, :], other=0.0)


@triton.jit
def _row(base, a, bok, f, K: tl.constexpr):
    """Σ_b C_{d a b} f[i, b, d] for the query basis index a (BLOCK_M, DV)."""
    return tl.sum(_gather(base, a, bok, K) * f, 1)


@triton.jit
def _finish(Cf, Out, Lse, b, h, dvc, i, dv, m_i, l_i, acc_v, acc_f, qc, sc, off, L, H, sob, soi, soh,
            G: tl.constexpr, K: tl.constexpr, KB: tl.constexpr, HAS_SURF: tl.constexpr,
            WITH_VALUE: tl.constexpr, STORE_LSE: tl.constexpr, BLOCK_M: tl.constexpr, DV: tl.constexpr,
            D: tl.constexpr):
    """Epilogue: contract with the 4 non-zero query bases, normalise by l, store (and the row lse)."""
    out = acc_v if WITH_VALUE else tl.zeros((BLOCK_M, DV), tl.float32)
    if HAS_SURF:
        f = tl.reshape(acc_f, (BLOCK_M, KB, DV))
        a0, w0, w1, w2, w3 = _spline(qc, sc, off, G)
        cb = tl.arange(0, KB)[None, :, None]
        dd = dv[None, None, :]
        base = Cf + h * (D * K * K) + dd * (K * K) + cb
        bok = (cb < K) & (dd < D)
        out += w0 * _row(base, a0, bok, f, K)
        out += w1 * _row(base, a0 + 1, bok, f, K)
        out += w2 * _row(base, a0 + 2, bok, f, K)
        out += w3 * _row(base, a0 + 3, bok, f, K)
    seen = l_i > 0
    out = tl.where(seen[:, None], out / tl.where(seen, l_i, 1.0)[:, None], 0.0)
    tl.store(Out + b * sob + i[:, None] * soi + h * soh + dv[None, :], out,
             mask=(i[:, None] < L) & (dv[None, :] < D))
    if STORE_LSE:
        lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))
        if dvc == 0:
            tl.store(Lse + (b * H + h) * L + i, lse, mask=i < L)


@triton.jit
def _block_setup(Q, b, h, pid_m, dvc, sqb, sqh, sqi, L, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                 DV: tl.constexpr, D: tl.constexpr):
    i = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dfull = tl.arange(0, BLOCK_D)
    dv = dvc * DV + tl.arange(0, DV)
    qrow = Q + b * sqb + h * sqh + i[:, None] * sqi
    q_full = tl.load(qrow + dfull[None, :], mask=(i[:, None] < L) & (dfull[None, :] < D), other=0.0)
    qc = tl.load(qrow + dv[None, :], mask=(i[:, None] < L) & (dv[None, :] < D), other=0.0)
    return i, dv, q_full.to(tl.float32), qc.to(tl.float32)


@triton.jit
def _key_band(pid_m, L, T, offset, window, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The key interval [j0, j1) that the query block can see (tile-aligned start)."""
    j0 = 0
    j1 = T
    if CAUSAL:
        j1 = tl.minimum(T, (pid_m + 1) * BLOCK_M + offset)
        if WINDOW:
            j0 = tl.maximum(0, pid_m * BLOCK_M + offset - window + 1)
            j0 = (j0 // BLOCK_N) * BLOCK_N
    return j0, j1


@triton.jit
def _fwd(Q, Kp, V, Cf, Mk, Out, Lse, L, T, H, REP, N_DV, offset, scale, softcap, sc, off, window,
         sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, smb, smh, smi, smj, sob, soi, soh,
         G: tl.constexpr, K: tl.constexpr, KB: tl.constexpr, HAS_SURF: tl.constexpr, CAUSAL: tl.constexpr,
         MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, WITH_VALUE: tl.constexpr,
         STORE_LSE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
         DV: tl.constexpr, D: tl.constexpr):
    """Full forward: grid (query blocks, b·H, value-dim chunks)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    dvc = tl.program_id(2)
    b = bh // H
    h = bh % H
    hk = h // REP
    i, dv, q_full, qc = _block_setup(Q, b, h, pid_m, dvc, sqb, sqh, sqi, L, BLOCK_M, BLOCK_D, DV, D)
    j0, j1 = _key_band(pid_m, L, T, offset, window, CAUSAL, WINDOW, BLOCK_M, BLOCK_N)
    m_i, l_i, acc_v, acc_f = _attend(Q, Kp, V, Mk, b, h, hk, i, dv, q_full, j0, j1, L, T, offset, scale, softcap,
                                     sc, off, window, sqb, sqh, sqi, skb, skh, skj, svb, svh, svj,
                                     smb, smh, smi, smj, G, K, KB, HAS_SURF, CAUSAL, MASK_KIND, SOFTCAP,
                                     WINDOW, BLOCK_M, BLOCK_N, BLOCK_D, DV, D)
    _finish(Cf, Out, Lse, b, h, dvc, i, dv, m_i, l_i, acc_v, acc_f, qc, sc, off, L, H, sob, soi, soh,
            G, K, KB, HAS_SURF, WITH_VALUE, STORE_LSE, BLOCK_M, DV, D)


@triton.jit
def _store_partials(Pm, Pl, Pv, Pf, row, dv, m_i, l_i, acc_v, acc_f, N_DV, NS: tl.constexpr, BLOCK_M: tl.constexpr,
                    DV: tl.constexpr):
    """Split-K decode: one chunk's accumulators (``acc_f``: NS slices of DV) at ``row`` of the partial buffers."""
    tl.store(Pm + row, m_i)
    tl.store(Pl + row, l_i)
    DP = N_DV * DV
    tl.store(Pv + row[:, None] * DP + dv[None, :], acc_v)
    cb = tl.arange(0, NS)[None, :, None]
    tl.store(Pf + row[:, None, None] * (NS * DP) + cb * DP + dv[None, None, :], tl.reshape(acc_f, (BLOCK_M, NS, DV)))


@triton.jit
def _merge_partials(Pm, Pl, Pv, Pf, bh, i, dv, N_SPLIT, N_DV, LP, NS: tl.constexpr, BLOCK_M: tl.constexpr,
                    DV: tl.constexpr):
    """Split-K decode: the chunks' accumulators merged -> (m, l, acc_v, acc_f (BLOCK_M, NS·DV))."""
    BH = tl.num_programs(1)
    DP = N_DV * DV
    cb = tl.arange(0, NS)[None, :, None]
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc_v = tl.zeros((BLOCK_M, DV), tl.float32)
    acc_f = tl.zeros((BLOCK_M, NS, DV), tl.float32)
    for s in range(0, N_SPLIT):
        row = (s * BH + bh) * LP + i
        ms = tl.load(Pm + row)
        m_new = tl.maximum(m_i, ms)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        a_old = tl.exp(m_i - m_safe)
        a_new = tl.exp(ms - m_safe)
        l_i = l_i * a_old + tl.load(Pl + row) * a_new
        acc_v = acc_v * a_old[:, None] + tl.load(Pv + row[:, None] * DP + dv[None, :]) * a_new[:, None]
        fs = tl.load(Pf + row[:, None, None] * (NS * DP) + cb * DP + dv[None, None, :])
        acc_f = acc_f * a_old[:, None, None] + fs * a_new[:, None, None]
        m_i = m_new
    return m_i, l_i, acc_v, tl.reshape(acc_f, (BLOCK_M, NS * DV))


@triton.jit
def _partial(Q, Kp, V, Mk, Pm, Pl, Pv, Pf, L, T, H, REP, N_DV, CHUNK, LP, offset, scale, softcap, sc, off,
             window, sqb, sqh, sqi, skb, skh, skj, svb, svh, svj, smb, smh, smi, smj,
             G: tl.constexpr, K: tl.constexpr, KB: tl.constexpr, HAS_SURF: tl.constexpr, CAUSAL: tl.constexpr,
             MASK_KIND: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DV: tl.constexpr, D: tl.constexpr):
    """Split-K decode, part 1: accumulators of one key chunk. Grid (query blocks, b·H, splits·chunks)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    split = tl.program_id(2) // N_DV
    dvc = tl.program_id(2) % N_DV
    b = bh // H
    h = bh % H
    hk = h // REP
    i, dv, q_full, qc = _block_setup(Q, b, h, pid_m, dvc, sqb, sqh, sqi, L, BLOCK_M, BLOCK_D, DV, D)
    j0, j1 = _key_band(pid_m, L, T, offset, window, CAUSAL, WINDOW, BLOCK_M, BLOCK_N)
    j0 = tl.maximum(j0, split * CHUNK)
    j1 = tl.minimum(j1, (split + 1) * CHUNK)
    m_i, l_i, acc_v, acc_f = _attend(Q, Kp, V, Mk, b, h, hk, i, dv, q_full, j0, j1, L, T, offset, scale, softcap,
                                     sc, off, window, sqb, sqh, sqi, skb, skh, skj, svb, svh, svj,
                                     smb, smh, smi, smj, G, K, KB, HAS_SURF, CAUSAL, MASK_KIND, SOFTCAP,
                                     WINDOW, BLOCK_M, BLOCK_N, BLOCK_D, DV, D)
    row = (split * tl.num_programs(1) + bh) * LP + i  # (split, bh, i) in a (S, BH, LP) layout
    _store_partials(Pm, Pl, Pv, Pf, row, dv, m_i, l_i, acc_v, acc_f, N_DV, KB, BLOCK_M, DV)


@triton.jit
def _combine(Q, Cf, Pm, Pl, Pv, Pf, Out, Lse, L, H, N_SPLIT, N_DV, LP, sc, off, sqb, sqh, sqi, sob, soi, soh,
             G: tl.constexpr, K: tl.constexpr, KB: tl.constexpr, HAS_SURF: tl.constexpr,
             WITH_VALUE: tl.constexpr, STORE_LSE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
             DV: tl.constexpr, D: tl.constexpr):
    """Split-K decode, part 2: merge the chunks' accumulators, then the epilogue. Grid (blocks, b·H, chunks)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    dvc = tl.program_id(2)
    b = bh // H
    h = bh % H
    i, dv, q_full, qc = _block_setup(Q, b, h, pid_m, dvc, sqb, sqh, sqi, L, BLOCK_M, BLOCK_D, DV, D)
    m_i, l_i, acc_v, acc_f = _merge_partials(Pm, Pl, Pv, Pf, bh, i, dv, N_SPLIT, N_DV, LP, KB, BLOCK_M, DV)
    _finish(Cf, Out, Lse, b, h, dvc, i, dv, m_i, l_i, acc_v, acc_f, qc, sc, off, L, H,
            sob, soi, soh, G, K, KB, HAS_SURF, WITH_VALUE, STORE_LSE, BLOCK_M, DV, D)
