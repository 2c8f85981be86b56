/* RoPE rows on CPU for posenc's "native" backend; rope_cpu.py compiles this file on first use.
 *
 * One function per (layout, dtype), posenc_rope_<half|interleaved>_<f32|f64|bf16>: rotate the rows
 * [b, h, s, :2n] of x into out (out may be x), pairing channels (k, k + n) ("half") or (2k, 2k + 1)
 * ("interleaved"), by the angles whose cos/sin rows are contiguous [nb or 1, ns, n] with batch stride
 * cb (0: one table for the whole batch). With conjugate != 0 the rotation is by minus the angle (sin
 * negated): the gradient of the rotation. Channels [2n, d) are copied when out != x. Strides are in
 * elements; the channel stride is 1.
 *
 * Work is split into units of a few positions of one head, heads innermost, so the cos/sin rows of a
 * unit (TABLE_BYTES of them) are read from memory once and from L1 for every other head.
 *
 * Numerics:
 * - float32 and float64: the products and sums of posenc's reference recipe in its order, built with
 *   -ffp-contract=off (no fused multiply-add), so the results are bit-identical to it. The rotation by
 *   minus the angle is bit-identical to the recipe with sin negated (negation is exact).
 * - bfloat16: float32 arithmetic on float32 cos/sin, rounded once to bfloat16, to nearest even as
 *   torch rounds; NaN stays NaN. With AVX512-BF16 the rounding is one instruction, which flushes
 *   float32 denormals to zero where torch rounds them: a block holding one takes the integer path.
 */
#include <stdint.h>
#include <string.h>

#define TABLE_BYTES 16384

static inline float bf16_load(const uint16_t *p) {
    uint32_t u = (uint32_t)*p << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t bf16_round(float f) { /* nearest even, as torch rounds; NaN -> 0x7FC0 */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(((u & 0x7FFFFFFFu) > 0x7F800000u) ? 0x7FC0u : rounded);
}

/* ---- float32 and float64: plain loops the compiler vectorises; CONJ is a literal, so each call
 * site gets its own loop without a sign in it ------------------------------------------------------ */

#define ROW_FLOAT(T, SUFFIX)                                                                       \
    static inline void row_half_##SUFFIX(const T *x, T *o, const T *c, const T *s, int64_t n,     \
                                         int conj) {                                               \
        _Pragma("GCC ivdep") for (int64_t k = 0; k < n; k++) {                                     \
            T x1 = x[k], x2 = x[k + n], sk = conj ? -s[k] : s[k];                                  \
            o[k] = x1 * c[k] - x2 * sk;                                                            \
            o[k + n] = x2 * c[k] + x1 * sk;                                                        \
        }                                                                                          \
    }                                                                                              \
    static inline void row_interleaved_##SUFFIX(const T *x, T *o, const T *c, const T *s,         \
                                                int64_t n, int conj) {                             \
        _Pragma("GCC ivdep") for (int64_t k = 0; k < n; k++) {                                     \
            T x1 = x[2 * k], x2 = x[2 * k + 1], sk = conj ? -s[k] : s[k];                          \
            o[2 * k] = x1 * c[k] - x2 * sk;                                                        \
            o[2 * k + 1] = x2 * c[k] + x1 * sk;                                                    \
        }                                                                                          \
    }

ROW_FLOAT(float, f32)
ROW_FLOAT(double, f64)

/* ---- bfloat16 ---------------------------------------------------------------------------------- */

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#include <immintrin.h>
#define BF16_SIMD 1

static inline __m512 bf16x16_load(const uint16_t *p) { /* 16 bfloat16 -> float32, exactly */
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

static inline __m512i bf16x16_bits(__m512 v) { /* bf16_round in each lane, in the lane's low half */
    __m512i u = _mm512_castps_si512(v);
    __m512i bias = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)),
                                    _mm512_set1_epi32(0x7FFF));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    return _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
}

#if defined(__AVX512BF16__)
#define DENORMAL 0x20 /* vfpclassps: denormal */
static inline int has_denormal(__m512 a, __m512 b) {
    return (_mm512_fpclass_ps_mask(a, DENORMAL) | _mm512_fpclass_ps_mask(b, DENORMAL)) != 0;
}
#endif

static inline __m256i bf16x16_round(__m512 v) { /* 16 float32 -> 16 bfloat16 */
#if defined(__AVX512BF16__)
    if (__builtin_expect(!has_denormal(v, v), 1))
        return (__m256i)_mm512_cvtneps_pbh(v);
#endif
    return _mm512_cvtepi32_epi16(bf16x16_bits(v));
}

static inline __m512i bf16x32_round(__m512 lo, __m512 hi) { /* 32 float32 -> 32 bfloat16, lo first */
#if defined(__AVX512BF16__)
    if (__builtin_expect(!has_denormal(lo, hi), 1))
        return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
#endif
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(bf16x16_bits(lo))),
                              _mm512_cvtepi32_epi16(bf16x16_bits(hi)), 1);
}

static inline __m512i bf16x16_pairs(__m512 even, __m512 odd) { /* 16 pairs (even[k], odd[k]) */
#if defined(__AVX512BF16__)
    static const uint16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    if (__builtin_expect(!has_denormal(even, odd), 1)) {
        __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(odd, even); /* even[0..15], odd[0..15] */
        return _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)order), packed);
    }
#endif
    return _mm512_or_si512(bf16x16_bits(even), _mm512_slli_epi32(bf16x16_bits(odd), 16));
}

static inline __m512 sin_load(const float *s, __m512 flip) { /* sin, negated when flip holds the sign */
    return _mm512_xor_ps(_mm512_loadu_ps(s), flip);
}
#else
#define BF16_SIMD 0
#endif

static inline void row_half_bf16(const uint16_t *x, uint16_t *o, const float *c, const float *s, int64_t n,
                                 int conj) {
    int64_t k = 0;
#if BF16_SIMD
    const __m512 flip = _mm512_castsi512_ps(_mm512_set1_epi32(conj ? (int)0x80000000u : 0));
    for (; k + 32 <= n; k += 32) { /* all loads before the stores: o may be x */
        __m512 c0 = _mm512_loadu_ps(c + k), c1 = _mm512_loadu_ps(c + k + 16);
        __m512 s0 = sin_load(s + k, flip), s1 = sin_load(s + k + 16, flip);
        __m512 a0 = bf16x16_load(x + k), a1 = bf16x16_load(x + k + 16);
        __m512 b0 = bf16x16_load(x + k + n), b1 = bf16x16_load(x + k + n + 16);
        __m512i y1 = bf16x32_round(_mm512_sub_ps(_mm512_mul_ps(a0, c0), _mm512_mul_ps(b0, s0)),
                                   _mm512_sub_ps(_mm512_mul_ps(a1, c1), _mm512_mul_ps(b1, s1)));
        __m512i y2 = bf16x32_round(_mm512_add_ps(_mm512_mul_ps(b0, c0), _mm512_mul_ps(a0, s0)),
                                   _mm512_add_ps(_mm512_mul_ps(b1, c1), _mm512_mul_ps(a1, s1)));
        _mm512_storeu_si512((void *)(o + k), y1);
        _mm512_storeu_si512((void *)(o + k + n), y2);
    }
    for (; k + 16 <= n; k += 16) {
        __m512 ck = _mm512_loadu_ps(c + k), sk = sin_load(s + k, flip);
        __m512 x1 = bf16x16_load(x + k), x2 = bf16x16_load(x + k + n);
        __m256i y1 = bf16x16_round(_mm512_sub_ps(_mm512_mul_ps(x1, ck), _mm512_mul_ps(x2, sk)));
        __m256i y2 = bf16x16_round(_mm512_add_ps(_mm512_mul_ps(x2, ck), _mm512_mul_ps(x1, sk)));
        _mm256_storeu_si256((__m256i *)(o + k), y1);
        _mm256_storeu_si256((__m256i *)(o + k + n), y2);
    }
#endif
#pragma GCC ivdep
    for (; k < n; k++) {
        float x1 = bf16_load(x + k), x2 = bf16_load(x + k + n), sk = conj ? -s[k] : s[k];
        o[k] = bf16_round(x1 * c[k] - x2 * sk);
        o[k + n] = bf16_round(x2 * c[k] + x1 * sk);
    }
}

static inline void row_interleaved_bf16(const uint16_t *x, uint16_t *o, const float *c, const float *s,
                                        int64_t n, int conj) {
    int64_t k = 0;
#if BF16_SIMD
    const __m512 flip = _mm512_castsi512_ps(_mm512_set1_epi32(conj ? (int)0x80000000u : 0));
    const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
    for (; k + 16 <= n; k += 16) { /* 16 pairs, one 32-bit word each: channel 2k in the low half */
        __m512i pairs = _mm512_loadu_si512((const void *)(x + 2 * k));
        __m512 x1 = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
        __m512 x2 = _mm512_castsi512_ps(_mm512_and_si512(pairs, high));
        __m512 ck = _mm512_loadu_ps(c + k), sk = sin_load(s + k, flip);
        __m512 y1 = _mm512_sub_ps(_mm512_mul_ps(x1, ck), _mm512_mul_ps(x2, sk));
        __m512 y2 = _mm512_add_ps(_mm512_mul_ps(x2, ck), _mm512_mul_ps(x1, sk));
        _mm512_storeu_si512((void *)(o + 2 * k), bf16x16_pairs(y1, y2));
    }
#endif
#pragma GCC ivdep
    for (; k < n; k++) {
        float x1 = bf16_load(x + 2 * k), x2 = bf16_load(x + 2 * k + 1), sk = conj ? -s[k] : s[k];
        o[2 * k] = bf16_round(x1 * c[k] - x2 * sk);
        o[2 * k + 1] = bf16_round(x2 * c[k] + x1 * sk);
    }
}

/* ---- the entry points --------------------------------------------------------------------------- */

#define KERNEL(NAME, T, C)                                                                          \
    void posenc_rope_##NAME(const T *x, T *out, const C *cos, const C *sin, int64_t nb, int64_t nh, \
                            int64_t ns, int64_t d, int64_t n, int64_t xb, int64_t xh, int64_t xs,   \
                            int64_t ob, int64_t oh, int64_t os, int64_t cb, int conjugate,          \
                            int threads) {                                                          \
        const int64_t fit = TABLE_BYTES / (int64_t)(2 * sizeof(C)) / (n > 0 ? n : 1);              \
        const int64_t rows = fit > 1 ? fit : 1, blocks = (ns + rows - 1) / rows;                    \
        _Pragma("omp parallel for collapse(3) schedule(static) num_threads(threads) if(threads > 1)") \
        for (int64_t b = 0; b < nb; b++)                                                            \
            for (int64_t block = 0; block < blocks; block++)                                        \
                for (int64_t h = 0; h < nh; h++) {                                                  \
                    const int64_t end = (block + 1) * rows < ns ? (block + 1) * rows : ns;          \
                    for (int64_t s = block * rows; s < end; s++) {                                  \
                        const T *xr = x + b * xb + h * xh + s * xs;                                 \
                        T *o = out + b * ob + h * oh + s * os;                                      \
                        const C *cr = cos + b * cb + s * n, *sr = sin + b * cb + s * n;             \
                        if (conjugate)                                                              \
                            row_##NAME(xr, o, cr, sr, n, 1);                                        \
                        else                                                                        \
                            row_##NAME(xr, o, cr, sr, n, 0);                                        \
                        if (o != xr && d > 2 * n)                                                   \
                            memcpy(o + 2 * n, xr + 2 * n, (size_t)(d - 2 * n) * sizeof(T));         \
                    }                                                                               \
                }                                                                                   \
    }

KERNEL(half_f32, float, float)
KERNEL(interleaved_f32, float, float)
KERNEL(half_f64, double, double)
KERNEL(interleaved_f64, double, double)
KERNEL(half_bf16, uint16_t, float)
KERNEL(interleaved_bf16, uint16_t, float)
