// ---- attention of key-side features, flash style: o = softmax(s q k^T) f without the attention matrix ------
// f (B, Hf, T, W): the rank-r narrow features per query head (Hf = H, W = (R+1)*D) or the exact ones per KV
// head (Hf = Hkv, W = D*(K+1); the rep query heads of a KV head are then stacked as rows of one block). The
// weights of one block of rows over one key tile live in a buffer that stays in cache: scores by one GEMM, an
// online softmax (running max and sum per row, the accumulator rescaled when the max grows), then
// acc += P f_tile by a second GEMM.

#if defined(__AVX2__) && defined(__FMA__)
// exp of 8 floats (Cephes' expf: range reduction by ln 2 and a degree-6 polynomial, about 1 ulp); inputs
// below -87 give 0 (they are the masked entries and terms under fp32 resolution beside the row's max, 1).
static inline __m256 exp8(__m256 x) {
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    const __m256i n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(n)), keep);
}
#endif

// p[j] = exp(x[j] - m) for j < n, returns their sum (x holds the scaled scores, -inf where masked).
static inline float exp_row(float* x, int64_t n, float m) {
    int64_t j = 0;
    float sum = 0.0f;
#ifdef GEOSTEER_AVX2
    const __m256 vm = _mm256_set1_ps(m);
    __m256 acc = _mm256_setzero_ps();
    for (; j + 8 <= n; j += 8) {
        const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
        _mm256_storeu_ps(x + j, p);
        acc = _mm256_add_ps(acc, p);
    }
    sum = hsum8(acc);
#endif
    for (; j < n; ++j) {
        x[j] = x[j] - m < -87.0f ? 0.0f : std::exp(x[j] - m);
        sum += x[j];
    }
    return sum;
}

// Scores of one row of a tile, in place: scaled (or soft-capped), the first n visible, the rest -> 0 weight;
// returns the row's max over the visible ones (-inf if none).
static inline float scale_row(float* x, int64_t n, int64_t width, float scaling, float softcap) {
    float mx = -INFINITY;
    if (softcap > 0.0f) {
        const float a = scaling / softcap;
        for (int64_t j = 0; j < n; ++j) {
            x[j] = std::tanh(x[j] * a) * softcap;
            mx = std::max(mx, x[j]);
        }
    } else {
        for (int64_t j = 0; j < n; ++j) {
            x[j] *= scaling;
            mx = std::max(mx, x[j]);
        }
    }
    for (int64_t j = n; j < width; ++j) x[j] = -INFINITY;
    return mx;
}

// One block of rows (G heads x nq queries from s0, row g*nq + i is query s0 + i of the g-th head) over keys
// [0, kend): key tiles from the end backwards, so that only the last tile (the causal diagonal) holds masked
// pairs. acc (G*nq, W) gets the unnormalised sums, l the softmax denominators.
static void flash_block(const torch::Tensor& qb, const torch::Tensor& kh, const torch::Tensor& fh, torch::Tensor& acc,
                        float* sbuf, std::vector<float>& m, std::vector<float>& l, int64_t nq, int64_t s0,
                        int64_t kend, int64_t off, bool causal, int64_t bk, float scaling, float softcap) {
    const int64_t rows = qb.size(0), W = fh.size(1);
    std::fill(m.begin(), m.begin() + rows, -INFINITY);
    std::fill(l.begin(), l.begin() + rows, 0.0f);
    acc.zero_();
    float* ap = acc.data_ptr<float>();
    for (int64_t k1 = kend; k1 > 0; k1 -= bk) {
        const int64_t k0 = std::max<int64_t>(0, k1 - bk), nk = k1 - k0;
        auto s = torch::from_blob(sbuf, {rows, nk}, qb.options());
        at::mm_out(s, qb, kh.narrow(0, k0, nk).t());
        for (int64_t i = 0; i < rows; ++i) {
            float* x = sbuf + i * nk;
            const int64_t qi = s0 + i % nq;
            const int64_t n = causal ? std::min<int64_t>(nk, std::max<int64_t>(0, qi + off + 1 - k0)) : nk;
            const float mx = scale_row(x, n, nk, scaling, softcap);
            const float mn = std::max(m[i], mx);
            if (mn == -INFINITY) {  // nothing visible yet in this row
                std::fill(x, x + nk, 0.0f);
                continue;
            }
            const float alpha = m[i] == -INFINITY ? 0.0f : std::exp(m[i] - mn);
            const float sum = exp_row(x, nk, mn);
            if (alpha != 1.0f) {
                float* a = ap + i * W;
                for (int64_t c = 0; c < W; ++c) a[c] *= alpha;
            }
            l[i] = l[i] * alpha + sum;
            m[i] = mn;
        }
        acc.addmm_(s, fh.narrow(0, k0, nk));
    }
}

// q (B, H, L, D), k (B, Hkv, T, D), f (B, Hf, T, W) float32 (Hf = H or Hkv, see above) -> o (B, H, L, W) =
// softmax(scaling q k^T) f; causal: key j visible to query i iff j <= i + T - L; softcap > 0: scores
// tanh(scaling q k / softcap) * softcap. Blocks of bq queries, key tiles of bk; tasks (b, feature head, block)
// pair the short and long causal blocks.
torch::Tensor feature_flash(torch::Tensor q, torch::Tensor k, torch::Tensor f, double scaling, double softcap,
                             bool causal, int64_t bq, int64_t bk) {
    TORCH_CHECK(q.scalar_type() == torch::kFloat && k.scalar_type() == torch::kFloat &&
                f.scalar_type() == torch::kFloat, "float32 only");
    q = q.contiguous(); k = k.contiguous(); f = f.contiguous();
    const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), Hkv = k.size(1), T = k.size(2);
    const int64_t Hf = f.size(1), W = f.size(3);
    TORCH_CHECK(H % Hkv == 0 && (Hf == H || Hf == Hkv) && f.size(2) == T && k.size(3) == D, "shape mismatch");
    const int64_t rep = H / Hkv, G = H / Hf, nb = (L + bq - 1) / bq, off = T - L;
    auto out = torch::empty({B, H, L, W}, q.options());
    const float* qp = q.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, B * Hf * nb, 1, [&](int64_t t0, int64_t t1) {
        std::vector<float> sbuf(G * bq * bk), m(G * bq), l(G * bq);
        auto qbuf = torch::empty({G * bq, D}, q.options());
        auto abuf = torch::empty({G * bq, W}, q.options());
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t bh = t / nb, j = t % nb, b = bh / Hf, hf = bh % Hf;
            const int64_t blk = (j % 2 == 0) ? j / 2 : nb - 1 - j / 2;
            const int64_t s0 = blk * bq, e0 = std::min(L, s0 + bq), nq = e0 - s0;
            const int64_t kend = causal ? std::min<int64_t>(T, std::max<int64_t>(0, e0 + off)) : T;
            float* qr = qbuf.data_ptr<float>();
            for (int64_t g = 0; g < G; ++g)
                std::copy(qp + ((b * H + hf * G + g) * L + s0) * D, qp + ((b * H + hf * G + g) * L + e0) * D,
                          qr + g * nq * D);
            auto acc = abuf.narrow(0, 0, G * nq);
            if (kend == 0) acc.zero_();
            else {
                flash_block(qbuf.narrow(0, 0, G * nq), k[b][hf * G / rep], f[b][hf], acc, sbuf.data(), m, l, nq, s0,
                            kend, off, causal, bk, (float)scaling, (float)softcap);
            }
            const float* ap = acc.data_ptr<float>();
            for (int64_t i = 0; i < G * nq; ++i) {
                const float inv = kend > 0 && l[i] > 0.0f ? 1.0f / l[i] : 0.0f;  // no visible key: 0
                float* dst = op + ((b * H + hf * G + i / nq) * L + s0 + i % nq) * W;
                for (int64_t c = 0; c < W; ++c) dst[c] = ap[i * W + c] * inv;
            }
        }
    });
    return out;
}
