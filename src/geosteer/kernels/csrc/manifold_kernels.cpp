
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <vector>

static inline void pieces(float t, float* w) {
    const float t2 = t * t, t3 = t2 * t, m = 1.0f - t;
    w[0] = m * m * m * (1.0f / 6.0f);
    w[3] = t3 * (1.0f / 6.0f);
    w[1] = t3 * 0.5f - t2 + (2.0f / 3.0f);
    w[2] = 1.0f - w[0] - w[1] - w[3];
}

static inline void dpieces(float t, float* dw) {
    const float m = 1.0f - t;
    dw[0] = -0.5f * m * m;
    dw[3] = 0.5f * t * t;
    dw[1] = 1.5f * t * t - 2.0f * t;
    dw[2] = -(dw[0] + dw[1] + dw[3]);
}

// Knot position of x (u = x*sc + off, clamped to [0, g+6], NaN -> 0): the 4 piece weights w (and their
// t-derivatives dw, when given) and the index a0 of the first of the 4 bases that can be non-zero.
// Returns whether x lies inside the support before clamping (the derivative is 0 outside).
static inline bool locate(float x, float fsc, float foff, float hi, float* w, float* dw, int64_t* a0) {
    float u = x * fsc + foff;
    const bool inside = u >= 0.0f && u <= hi;
    u = u < 0.0f ? 0.0f : (u > hi ? hi : u);
    if (u != u) u = 0.0f;
    const float s = std::floor(u);
    pieces(u - s, w);
    if (dw) dpieces(u - s, dw);
    *a0 = (int64_t)s - 3;
    return inside;
}

// feats (N, D, K+1): v*B_0(k) ... v*B_{K-1}(k), v   for k, v (N, D)
torch::Tensor key_features(torch::Tensor k, torch::Tensor v, int64_t g, double sc, double off) {
    TORCH_CHECK(k.scalar_type() == torch::kFloat && v.scalar_type() == torch::kFloat, "float32 only");
    k = k.contiguous(); v = v.contiguous();
    const int64_t D = k.size(-1), N = k.numel() / D, K = g + 3;
    auto sizes = k.sizes().vec(); sizes.push_back(K + 1);
    auto out = torch::empty(sizes, k.options());
    const float* kp = k.data_ptr<float>(); const float* vp = v.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const float fsc = (float)sc, foff = (float)off, hi = (float)(g + 6);
    at::parallel_for(0, N, 16, [&](int64_t b0, int64_t b1) {
        for (int64_t n = b0; n < b1; ++n) {
            for (int64_t d = 0; d < D; ++d) {
                const float x = kp[n * D + d], val = vp[n * D + d];
                float* row = op + (n * D + d) * (K + 1);
                for (int64_t c = 0; c < K; ++c) row[c] = 0.0f;
                row[K] = val;
                float w[4]; int64_t a0;
                locate(x, fsc, foff, hi, w, nullptr, &a0);
                for (int r = 0; r < 4; ++r) {
                    const int64_t a = a0 + r;
                    if (a >= 0 && a < K) row[a] = w[r] * val;
                }
            }
        }
    });
    return out;
}

// o (B, H, n, D, K+1) attended features; q (B, H, n, D); c (H, D, K, K) -> out (B, H, n, D)
// out = o[..., K] (if with_value) + sum_r w_r(q) * sum_b c[h, d, a_r, b] * o[..., b]
// The coefficients are read from cz (H, D, K+7, W): 3 zero rows before, 4 after and zero lanes from K to W,
// so any a0 + r (in [-3, K+3]) reads a valid row and neither the row choice nor a load needs a branch.
// One row loop for every K; `dot(c0, W, w, f)` combines the four rows at c0 with the piece weights w and
// dots them with the attended features f (a scalar version and an AVX2 one below).
static torch::Tensor pad_coeff(const torch::Tensor& c, int64_t K, int64_t W) {
    auto cz = torch::zeros({c.size(0), c.size(1), K + 7, W}, c.options());
    cz.narrow(2, 3, K).narrow(3, 0, K).copy_(c);
    return cz;
}

template <typename Dot>
static void epilogue_rows(const float* op, const float* qp, const float* cz, float* outp, int64_t B, int64_t H,
                          int64_t n, int64_t D, int64_t K, int64_t W, float fsc, float foff, float hi,
                          bool with_value, Dot dot) {
    const int64_t R = K + 7;
    at::parallel_for(0, B * H * n, std::max<int64_t>(4, 2048 / D), [&](int64_t b0, int64_t b1) {
        for (int64_t row = b0; row < b1; ++row) {
            const int64_t h = (row / n) % H;
            const float* orow = op + row * D * (K + 1);
            const float* qrow = qp + row * D;
            for (int64_t d = 0; d < D; ++d) {
                const float* f = orow + d * (K + 1);
                float w[4]; int64_t a0;
                locate(qrow[d], fsc, foff, hi, w, nullptr, &a0);
                const float v = dot(cz + ((h * D + d) * R + a0 + 3) * W, W, w, f);
                outp[row * D + d] = with_value ? f[K] + v : v;
            }
        }
    });
}

// KK > 0: K known at compile time (unrolled); KK == 0: runtime K.
template <int KK>
struct ScalarDot {
    int64_t K;
    float operator()(const float* c0, int64_t W, const float* w, const float* f) const {
        const int64_t k = KK > 0 ? KK : K;
        float acc = 0.0f;
        for (int64_t b = 0; b < k; ++b)
            acc += (w[0] * c0[b] + w[1] * c0[W + b] + w[2] * c0[2 * W + b] + w[3] * c0[3 * W + b]) * f[b];
        return acc;
    }
};

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GEOSTEER_AVX2 1
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(s);
    s = _mm_add_ps(s, sh);
    sh = _mm_movehl_ps(sh, s);
    return _mm_cvtss_f32(_mm_add_ss(s, sh));
}

// NC 8-lane chunks cover K <= 8*NC = W; only the last chunk of f needs a mask (it has K+1 entries).
template <int NC>
struct Avx2Dot {
    __m256i fmask;
    explicit Avx2Dot(int64_t K) {
        const int64_t last = K - 8 * (NC - 1);
        fmask = _mm256_setr_epi32(0 < last ? -1 : 0, 1 < last ? -1 : 0, 2 < last ? -1 : 0, 3 < last ? -1 : 0,
                                  4 < last ? -1 : 0, 5 < last ? -1 : 0, 6 < last ? -1 : 0, 7 < last ? -1 : 0);
    }
    float operator()(const float* c0, int64_t W, const float* w, const float* f) const {
        const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]);
        const __m256 w2 = _mm256_set1_ps(w[2]), w3 = _mm256_set1_ps(w[3]);
        __m256 acc = _mm256_setzero_ps();
        for (int c = 0; c < NC; ++c) {
            __m256 s = _mm256_mul_ps(w0, _mm256_loadu_ps(c0 + c * 8));
            s = _mm256_fmadd_ps(w1, _mm256_loadu_ps(c0 + W + c * 8), s);
            s = _mm256_fmadd_ps(w2, _mm256_loadu_ps(c0 + 2 * W + c * 8), s);
            s = _mm256_fmadd_ps(w3, _mm256_loadu_ps(c0 + 3 * W + c * 8), s);
            const __m256 fv = c < NC - 1 ? _mm256_loadu_ps(f + c * 8) : _mm256_maskload_ps(f + c * 8, fmask);
            acc = _mm256_fmadd_ps(s, fv, acc);
        }
        return hsum8(acc);
    }
};
#endif

torch::Tensor epilogue(torch::Tensor o, torch::Tensor q, torch::Tensor c, int64_t g, double sc, double off,
                       bool with_value) {
    TORCH_CHECK(o.scalar_type() == torch::kFloat && q.scalar_type() == torch::kFloat &&
                c.scalar_type() == torch::kFloat, "float32 only");
    o = o.contiguous(); q = q.contiguous(); c = c.contiguous();
    const int64_t B = q.size(0), H = q.size(1), n = q.size(2), D = q.size(3), K = g + 3;
    TORCH_CHECK(o.size(-1) == K + 1 && c.size(0) == H && c.size(1) == D && c.size(2) == K, "shape mismatch");
    auto out = torch::empty({B, H, n, D}, q.options());
    const float* op = o.data_ptr<float>(); const float* qp = q.data_ptr<float>(); float* outp = out.data_ptr<float>();
    const float fsc = (float)sc, foff = (float)off, hi = (float)(g + 6);
    auto run = [&](int64_t W, auto dot) {
        auto cz = pad_coeff(c, K, W);
        epilogue_rows(op, qp, cz.data_ptr<float>(), outp, B, H, n, D, K, W, fsc, foff, hi, with_value, dot);
    };
#ifdef GEOSTEER_AVX2
    if (K <= 8) { run(8, Avx2Dot<1>(K)); return out; }
    if (K <= 16) { run(16, Avx2Dot<2>(K)); return out; }
    if (K <= 24) { run(24, Avx2Dot<3>(K)); return out; }
#endif
    if (K == 11) run(K, ScalarDot<11>{K});
    else if (K == 19) run(K, ScalarDot<19>{K});
    else run(K, ScalarDot<0>{K});
    return out;
}

// gradients of key_features: grad_f (N, D, K+1) -> (grad_k, grad_v) (N, D)
std::vector<torch::Tensor> key_features_backward(torch::Tensor k, torch::Tensor v, torch::Tensor gf, int64_t g,
                                                 double sc, double off) {
    k = k.contiguous(); v = v.contiguous(); gf = gf.contiguous();
    const int64_t D = k.size(-1), N = k.numel() / D, K = g + 3;
    auto gk = torch::empty_like(k), gv = torch::empty_like(v);
    const float* kp = k.data_ptr<float>(); const float* vp = v.data_ptr<float>();
    const float* gp = gf.data_ptr<float>(); float* gkp = gk.data_ptr<float>(); float* gvp = gv.data_ptr<float>();
    const float fsc = (float)sc, foff = (float)off, hi = (float)(g + 6);
    at::parallel_for(0, N, 16, [&](int64_t b0, int64_t b1) {
        for (int64_t n = b0; n < b1; ++n) {
            for (int64_t d = 0; d < D; ++d) {
                const float* row = gp + (n * D + d) * (K + 1);
                const float x = kp[n * D + d], val = vp[n * D + d];
                float w[4], dw[4]; int64_t a0;
                const bool inside = locate(x, fsc, foff, hi, w, dw, &a0);
                float sv = row[K], sk = 0.0f;
                for (int r = 0; r < 4; ++r) {
                    const int64_t a = a0 + r;
                    if (a < 0 || a >= K) continue;
                    sv += row[a] * w[r];
                    sk += row[a] * dw[r];
                }
                gvp[n * D + d] = sv;
                gkp[n * D + d] = inside ? val * sk * fsc : 0.0f;
            }
        }
    });
    return {gk, gv};
}

// gradients of epilogue: grad_out (B, H, n, D) -> (grad_o, grad_q, grad_c)
std::vector<torch::Tensor> epilogue_backward(torch::Tensor o, torch::Tensor q, torch::Tensor c, torch::Tensor go,
                                             int64_t g, double sc, double off, bool with_value) {
    o = o.contiguous(); q = q.contiguous(); c = c.contiguous(); go = go.contiguous();
    const int64_t B = q.size(0), H = q.size(1), n = q.size(2), D = q.size(3), K = g + 3;
    auto gO = torch::empty_like(o), gQ = torch::empty_like(q), gC = torch::zeros_like(c);
    const float* op = o.data_ptr<float>(); const float* qp = q.data_ptr<float>();
    const float* cp = c.data_ptr<float>(); const float* gop = go.data_ptr<float>();
    float* gOp = gO.data_ptr<float>(); float* gQp = gQ.data_ptr<float>(); float* gCp = gC.data_ptr<float>();
    const float fsc = (float)sc, foff = (float)off, hi = (float)(g + 6);
    // parallel over heads: each head owns its slice of grad_c
    at::parallel_for(0, H, 1, [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h) {
            for (int64_t bb = 0; bb < B; ++bb) {
                for (int64_t i = 0; i < n; ++i) {
                    const int64_t row = (bb * H + h) * n + i;
                    for (int64_t d = 0; d < D; ++d) {
                        const int64_t idx = row * D + d;
                        const float* f = op + idx * (K + 1);
                        float* gf = gOp + idx * (K + 1);
                        const float gout = gop[idx];
                        float w[4], dw[4]; int64_t a0;
                        const bool inside = locate(qp[idx], fsc, foff, hi, w, dw, &a0);
                        for (int64_t b = 0; b < K; ++b) gf[b] = 0.0f;
                        gf[K] = with_value ? gout : 0.0f;
                        float gq = 0.0f;
                        const float* cb = cp + (h * D + d) * K * K;
                        float* gcb = gCp + (h * D + d) * K * K;
                        for (int r = 0; r < 4; ++r) {
                            const int64_t a = a0 + r;
                            if (a < 0 || a >= K) continue;
                            const float* crow = cb + a * K;
                            float* gcrow = gcb + a * K;
                            float dot = 0.0f;
                            const float gw = gout * w[r];
                            for (int64_t b = 0; b < K; ++b) {
                                dot += crow[b] * f[b];
                                gf[b] += gw * crow[b];
                                gcrow[b] += gw * f[b];
                            }
                            gq += dw[r] * dot;
                        }
                        gQp[idx] = inside ? gout * gq * fsc : 0.0f;
                    }
                }
            }
        }
    });
    return {gO, gQ, gC};
}

// ---- rank-r surfaces: C_d = U_d W_d^T with U, W (H, D, K, R) ----------------------------------------------
// A factor table zero-padded to (H, D, K+7, R): 3 zero rows before, 4 after, so the rows a0+3 ... a0+6 that a
// knot position selects are always valid (as in pad_coeff).
static torch::Tensor pad_factor(const torch::Tensor& f, int64_t K) {
    auto z = torch::zeros({f.size(0), f.size(1), K + 7, f.size(3)}, f.options());
    z.narrow(2, 3, K).copy_(f);
    return z;
}

// Knot positions of a row x[0 .. D) (as locate, branch-free so that the compiler vectorises it): the piece
// weights, planar (w[a * D + d]), and the offset of the first selected row of a padded table, (a0 + 3) * R.
static inline void locate_row(const float* x, int64_t D, int64_t R, float fsc, float foff, float hi, float* w,
                              int32_t* row) {
    for (int64_t d = 0; d < D; ++d) {
        float u = x[d] * fsc + foff;
        u = u < 0.0f ? 0.0f : (u > hi ? hi : u);
        u = u != u ? 0.0f : u;
        const float s = std::floor(u), t = u - s, t2 = t * t, t3 = t2 * t, m = 1.0f - t;
        const float w0 = m * m * m * (1.0f / 6.0f), w3 = t3 * (1.0f / 6.0f), w1 = t3 * 0.5f - t2 + (2.0f / 3.0f);
        w[d] = w0; w[D + d] = w1; w[2 * D + d] = 1.0f - w0 - w1 - w3; w[3 * D + d] = w3;
        row[d] = (int32_t)s * (int32_t)R;
    }
}

// p[d] = sum_a B_a(x_d) table[h, d, a, s] for one s: tz is the padded table of head h, (D, K+7, R) from row s
static inline void project_row(const float* tz, int64_t D, int64_t stride, int64_t R, const float* w,
                               const int32_t* row, float* p) {
    for (int64_t d = 0; d < D; ++d) {
        const float* t = tz + d * stride + row[d];
        p[d] = w[d] * t[0] + w[D + d] * t[R] + w[2 * D + d] * t[2 * R] + w[3 * D + d] * t[3 * R];
    }
}

// k, v (B, Hkv, T, D); w (H, D, K, R), H = Hkv * rep -> feats (B, H, T, (R+1)*D), planar, query head h reading
// KV head h / rep: feats[.., s*D + d] = v * sum_a B_a(k) w[h, d, a, s] for s < R, and v for s = R.
// The knot positions of each key row are located once per KV head and reused by its rep query heads.
torch::Tensor low_rank_key_features(torch::Tensor k, torch::Tensor v, torch::Tensor w, int64_t g, double sc,
                                    double off) {
    TORCH_CHECK(k.scalar_type() == torch::kFloat && v.scalar_type() == torch::kFloat &&
                w.scalar_type() == torch::kFloat, "float32 only");
    k = k.contiguous(); v = v.contiguous();
    const int64_t B = k.size(0), Hkv = k.size(1), T = k.size(2), D = k.size(3), K = g + 3;
    const int64_t H = w.size(0), R = w.size(3), rep = H / Hkv, S = R + 1, stride = (K + 7) * R;
    TORCH_CHECK(H == Hkv * rep && w.size(1) == D && w.size(2) == K, "shape mismatch");
    auto wz = pad_factor(w.contiguous(), K);
    auto out = torch::empty({B, H, T, S * D}, k.options());
    const float* kp = k.data_ptr<float>(); const float* vp = v.data_ptr<float>();
    const float* wp = wz.data_ptr<float>(); float* op = out.data_ptr<float>();
    const float fsc = (float)sc, foff = (float)off, hi = (float)(g + 6);
    at::parallel_for(0, B * Hkv * T, 16, [&](int64_t b0, int64_t b1) {
        std::vector<float> wt(4 * D); std::vector<int32_t> row(D);
        for (int64_t n = b0; n < b1; ++n) {
            const int64_t j = n % T, hk = (n / T) % Hkv, bb = n / (T * Hkv);
            locate_row(kp + n * D, D, R, fsc, foff, hi, wt.data(), row.data());
            const float* vr = vp + n * D;
            for (int64_t r = 0; r < rep; ++r) {
                const int64_t h = hk * rep + r;
                float* o = op + ((bb * H + h) * T + j) * S * D;
                for (int64_t s = 0; s < R; ++s) {
                    float* os = o + s * D;
                    project_row(wp + h * D * stride + s, D, stride, R, wt.data(), row.data(), os);
                    for (int64_t d = 0; d < D; ++d) os[d] *= vr[d];
                }
                std::copy(vr, vr + D, o + R * D);
            }
        }
    });
    return out;
}

// o (B, H, n, (R+1)*D) attended rank-r features (planar); q (B, H, n, D); u (H, D, K, R) -> out (B, n, H, D),
// the layout transformers expects: out = o[.., R*D + d] (if with_value) + sum_s (B(q_d)·u[h, d, :, s]) o[.., s*D + d]
torch::Tensor low_rank_epilogue(torch::Tensor o, torch::Tensor q, torch::Tensor u, int64_t g, double sc,
                                double off, bool with_value) {
    TORCH_CHECK(o.scalar_type() == torch::kFloat && q.scalar_type() == torch::kFloat &&
                u.scalar_type() == torch::kFloat, "float32 only");
    o = o.contiguous(); q = q.contiguous();
    const int64_t B = q.size(0), H = q.size(1), n = q.size(2), D = q.size(3), K = g + 3, R = u.size(3);
    const int64_t S = R + 1, stride = (K + 7) * R;
    TORCH_CHECK(o.size(-1) == S * D && u.size(0) == H && u.size(1) == D && u.size(2) == K, "shape mismatch");
    auto uz = pad_factor(u.contiguous(), K);
    auto out = torch::empty({B, n, H, D}, q.options());
    const float* op = o.data_ptr<float>(); const float* qp = q.data_ptr<float>();
    const float* up = uz.data_ptr<float>(); float* outp = out.data_ptr<float>();
    const float fsc = (float)sc, foff = (float)off, hi = (float)(g + 6);
    at::parallel_for(0, B * H * n, std::max<int64_t>(4, 2048 / D), [&](int64_t b0, int64_t b1) {
        std::vector<float> wt(4 * D), p(D); std::vector<int32_t> rows(D);
        for (int64_t row = b0; row < b1; ++row) {
            const int64_t i = row % n, h = (row / n) % H, bb = row / (n * H);
            const float* f = op + row * S * D;
            float* dst = outp + ((bb * n + i) * H + h) * D;
            locate_row(qp + row * D, D, R, fsc, foff, hi, wt.data(), rows.data());
            for (int64_t d = 0; d < D; ++d) dst[d] = with_value ? f[R * D + d] : 0.0f;
            for (int64_t s = 0; s < R; ++s) {
                project_row(up + h * D * stride + s, D, stride, R, wt.data(), rows.data(), p.data());
                const float* fs = f + s * D;
                for (int64_t d = 0; d < D; ++d) dst[d] += p[d] * fs[d];
            }
        }
    });
    return out;
}
