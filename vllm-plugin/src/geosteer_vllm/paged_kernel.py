"""A compiled CPU kernel for the shared-key surfaces path: attended key features from vLLM's paged cache.

Per token row n and query head h: the stock weights a_j over the row's sequence (causal, window, soft-cap)
and o[n, h, d, b] = Σ_j a_j v_jd B_b(k_jd) (4 non-zero bases), o[..., K] = Σ_j a_j v_jd: the layout of
``kernels.exact``'s epilogue. Reads vLLM's float32 CPU layout; None when unbuilt or ``GEOSTEER_NO_EXT=1``.
"""

from __future__ import annotations

import torch

from geosteer.kernels.exact import grid_affine
from geosteer.kernels.ext import LazyExtension, build_inline

SOURCE = r"""

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <vector>

// q (N, H, D); kv (NB, HKV, BS, 2D); table (B, M) block ids; row_seq, row_pos (N): sequence and position
// of each row -> (N, H, D, K+1): per head and dim the attended v*B_0(k) ... v*B_{K-1}(k), then v.
// Knot positions as manifold_kernels.cpp's locate computes them: u = x*sc + off clamped to [0, g+6], NaN -> 0.
torch::Tensor paged_features(torch::Tensor q, torch::Tensor kv, torch::Tensor table, torch::Tensor row_seq,
                             torch::Tensor row_pos, double scale, double softcap, int64_t window, int64_t g,
                             double sc, double off) {
    TORCH_CHECK(q.scalar_type() == torch::kFloat && kv.scalar_type() == torch::kFloat, "float32 only");
    TORCH_CHECK(kv.stride(3) == 1 && kv.stride(2) == kv.size(3), "a (block, KV head) must be contiguous");
    q = q.contiguous();
    auto tab = table.to(torch::kLong).contiguous();
    auto rs = row_seq.to(torch::kLong).contiguous(), rp = row_pos.to(torch::kLong).contiguous();
    const int64_t N = q.size(0), H = q.size(1), D = q.size(2);
    const int64_t HKV = kv.size(1), BS = kv.size(2), M = tab.size(1), K = g + 3, R = H / HKV;
    auto out = torch::empty({N, H, D, K + 1}, q.options());
    const float* qp = q.data_ptr<float>(); const float* kvp = kv.data_ptr<float>();
    const int64_t* tp = tab.data_ptr<int64_t>(); const int64_t* sp = rs.data_ptr<int64_t>();
    const int64_t* pp = rp.data_ptr<int64_t>();
    float* op = out.data_ptr<float>();
    const int64_t sb = kv.stride(0), sh = kv.stride(1);  // block and KV-head strides of the cache
    const float fsc = (float)sc, foff = (float)off, hi = (float)(g + 6), fscale = (float)scale;
    const float cap = (float)softcap;
    at::parallel_for(0, N * HKV, 1, [&](int64_t b0, int64_t b1) {
        const int64_t KP = K + 7;
        std::vector<float> p, F(R * D * KP), V(R * D), Kt(BS * D), W0(D), W1(D), W2(D), W3(D), pjs(R);
        std::vector<int32_t> A(D);
        float* __restrict__ kt_ = Kt.data(); float* __restrict__ w0_ = W0.data(); float* __restrict__ w1_ = W1.data();
        float* __restrict__ w2_ = W2.data(); float* __restrict__ w3_ = W3.data(); int32_t* __restrict__ a_ = A.data();
        for (int64_t ng = b0; ng < b1; ++ng) {
            const int64_t n = ng / HKV, gk = ng % HKV, s = sp[n], pos = pp[n];
            const int64_t j0 = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0, T = pos + 1 - j0;
            p.assign(R * T, 0.0f);
            // scores of the R query heads of this KV head, block by block (keys of a block are contiguous per dim)
            for (int64_t j = j0; j <= pos;) {
                const int64_t blk = tp[s * M + j / BS], o0 = j % BS, o1 = std::min(BS, o0 + pos + 1 - j);
                const float* kb = kvp + blk * sb + gk * sh;
                for (int64_t r = 0; r < R; ++r) {
                    const float* qr = qp + (n * H + gk * R + r) * D;
                    float* __restrict__ pr = p.data() + r * T + (j - j0) - o0;
                    for (int64_t d = 0; d < D; ++d) {
                        const float qd = qr[d]; const float* kd = kb + d * BS;
#pragma omp simd
                        for (int64_t o = o0; o < o1; ++o) pr[o] += qd * kd[o];
                    }
                }
                j += o1 - o0;
            }
            for (int64_t r = 0; r < R; ++r) {
                float* pr = p.data() + r * T;
                float mx = -INFINITY;
                for (int64_t t = 0; t < T; ++t) {
                    float x = pr[t] * fscale;
                    if (cap > 0.0f) x = std::tanh(x / cap) * cap;
                    pr[t] = x; mx = std::max(mx, x);
                }
                float sum = 0.0f;
                for (int64_t t = 0; t < T; ++t) { pr[t] = std::exp(pr[t] - mx); sum += pr[t]; }
                for (int64_t t = 0; t < T; ++t) pr[t] /= sum;
            }
            // accumulate into F (R, D, KP): basis a at a + 3, guard rows around it, so no branch per basis
            std::fill(F.begin(), F.end(), 0.0f);
            std::fill(V.begin(), V.end(), 0.0f);
            for (int64_t j = j0; j <= pos;) {  // block by block
                const int64_t blk = tp[s * M + j / BS], o0 = j % BS, o1 = std::min(BS, o0 + pos + 1 - j);
                const float* kb = kvp + blk * sb + gk * sh;
                for (int64_t d = 0; d < D; ++d)  // the block's keys as (key, dim)
#pragma omp simd
                    for (int64_t o = o0; o < o1; ++o) kt_[o * D + d] = kb[d * BS + o];
                for (int64_t o = o0; o < o1; ++o) {
                    const float* __restrict__ vb = kb + BS * D + o * D;
                    const float* __restrict__ kt = kt_ + o * D;
                    const int64_t t = j - j0 + o - o0;
#pragma omp simd
                    for (int64_t d = 0; d < D; ++d) {  // this key's knot positions; u >= 0, so int() floors
                        float u = kt[d] * fsc + foff;
                        u = u > 0.0f ? u : 0.0f;  // NaN -> 0
                        u = u < hi ? u : hi;
                        const int32_t i = (int32_t)u;
                        const float x = u - (float)i, x2 = x * x, x3 = x2 * x, m = 1.0f - x;
                        const float a0 = m * m * m * (1.0f / 6.0f), a3 = x3 * (1.0f / 6.0f);
                        const float a1 = x3 * 0.5f - x2 + (2.0f / 3.0f);
                        w0_[d] = a0; w1_[d] = a1; w2_[d] = 1.0f - a0 - a1 - a3; w3_[d] = a3; a_[d] = i;
                    }
                    for (int64_t r = 0; r < R; ++r) {  // the stock output, contiguous over d
                        const float pj = p[r * T + t];
                        pjs[r] = pj;
                        float* __restrict__ Vr = V.data() + r * D;
#pragma omp simd
                        for (int64_t d = 0; d < D; ++d) Vr[d] += pj * vb[d];
                    }
                    for (int64_t d = 0; d < D; ++d) {
                        const float vd = vb[d], c0 = w0_[d], c1 = w1_[d], c2 = w2_[d], c3 = w3_[d];
                        float* f = F.data() + d * KP + a_[d];
                        for (int64_t r = 0; r < R; ++r, f += D * KP) {
                            const float pv = pjs[r] * vd;
                            f[0] += c0 * pv; f[1] += c1 * pv; f[2] += c2 * pv; f[3] += c3 * pv;
                        }
                    }
                }
                j += o1 - o0;
            }
            for (int64_t r = 0; r < R; ++r)
                for (int64_t d = 0; d < D; ++d) {
                    float* row = op + ((n * H + gk * R + r) * D + d) * (K + 1);
                    const float* f = F.data() + (r * D + d) * KP + 3;
                    for (int64_t a = 0; a < K; ++a) row[a] = f[a];
                    row[K] = V[r * D + d];
                }
        }
    });
    return out;
}
"""

_EXT = LazyExtension(lambda _: build_inline("serve_paged_v8", [SOURCE], ["paged_features"], ["-fopenmp"]))
get, status = _EXT.get, _EXT.status  # the compiled module or None; why not


def attended_features(mod, q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                      row_seq: torch.Tensor, row_pos: torch.Tensor, *, scale: float, softcap: float | None,
                      window: int, grid: tuple[int, float, float]) -> torch.Tensor:
    """(N, H, d, K+1) for the rows' queries ``q`` (N, H, d), sequences ``row_seq`` and positions ``row_pos``."""
    g, lo, hi = grid
    sc, off = grid_affine(g, lo, hi)
    return mod.paged_features(q, kv_cache, block_table, row_seq, row_pos, float(scale), float(softcap or 0.0),
                              int(window), int(g), sc, off)
