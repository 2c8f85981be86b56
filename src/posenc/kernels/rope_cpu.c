/* RoPE rows on CPU for posenc's "native" backend; rope_cpu.py compiles this file on first use.
 *
 * One function per (layout, dtype of x, dtype of the tables), posenc_rope_<half|interleaved>_<x>_<t>
 * with x in f32, bf16 (tables f32 or f64) or f64 (tables f64): rotate the rows [b, h, s, :2n] of x
 * into out (out may be x), pairing channels (k, k + n) ("half") or (2k, 2k + 1) ("interleaved"), by
 * the angles whose cos/sin rows are contiguous [nb or 1, ns, n] with batch stride cb (0: one table
 * for the whole batch). With conjugate != 0 the rotation is by minus the angle (sin negated): the
 * gradient of the rotation. Channels [2n, d) are copied when out != x. Strides are in elements; the
 * channel stride is 1. Returns 0, or 1 (nothing written) where its working memory cannot be had.
 * With stream != 0 (asked for outputs larger than the caches, out != x) the rotated rows are written
 * with non-temporal stores where every row starts on a 64-byte line: a store then needs no read of
 * the line it fills, which a plain store does (read for ownership), so the kernel moves the bytes a
 * copy moves (read x, write out) instead of reading out as well.
 *
 * Work is split into blocks of positions of one batch row (TABLE_BYTES of cos/sin); within a block
 * the rows are visited in the order they lie in memory (heads innermost for [b, h, s, d], positions
 * innermost for the [b, s, h, d] projection viewed as [b, h, s, d]), and every head reads the
 * block's cos/sin rows from L1. Tables of another type than the arithmetic
 * one (float64 tables for float32 arithmetic) are converted once per block into a thread's own.
 *
 * Numerics:
 * - float32 and float64: the products and sums of posenc's reference recipe in its order, built with
 *   -ffp-contract=off (no fused multiply-add), from the tables rounded once to x's type, so the
 *   results are bit-identical to it. The rotation by minus the angle is bit-identical to the recipe
 *   with sin negated (negation is exact).
 * - bfloat16: float32 arithmetic on the tables rounded once to float32, rounded once to bfloat16, to
 *   nearest even as torch rounds (float32 denormals included); NaN stays NaN.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_BYTES 16384
/* Where a block visits one head's positions in a run (positions innermost in memory) and the rows are
 * at least as wide as their tables (float32, float64), the tables are read from L2 instead: long runs
 * keep the hardware prefetchers on one stream per head. Narrower rows (bfloat16, whose float32 tables
 * are twice their bytes) keep L1 blocks and prefetch the next head's rows one block of rows ahead. */
#define RUN_TABLE_BYTES (1 << 19)

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

/* ---- float32 and float64 ------------------------------------------------------------------------ */

/* Plain loops the compiler vectorises (float64, and float32 without AVX-512). CONJ is a literal at
 * every call site, so each gets its own loop without a sign in it. */
#define ROW_GENERIC(T, SUFFIX)                                                                     \
    static inline void row_half_##SUFFIX(const T *x, T *o, const T *c, const T *s, int64_t n,     \
                                         int conj, int st) {                                       \
        (void)st; /* plain stores: the compiler's loop */                                          \
        _Pragma("GCC ivdep") for (int64_t k = 0; k < n; k++) {                                     \
            T x1 = x[k], x2 = x[k + n], sk = conj ? -s[k] : s[k];                                  \
            o[k] = x1 * c[k] - x2 * sk;                                                            \
            o[k + n] = x2 * c[k] + x1 * sk;                                                        \
        }                                                                                          \
    }                                                                                              \
    static inline void row_interleaved_##SUFFIX(const T *x, T *o, const T *c, const T *s,         \
                                                int64_t n, int conj, int st) {                     \
        (void)st;                                                                                  \
        _Pragma("GCC ivdep") for (int64_t k = 0; k < n; k++) {                                     \
            T x1 = x[2 * k], x2 = x[2 * k + 1], sk = conj ? -s[k] : s[k];                          \
            o[2 * k] = x1 * c[k] - x2 * sk;                                                        \
            o[2 * k + 1] = x2 * c[k] + x1 * sk;                                                    \
        }                                                                                          \
    }

ROW_GENERIC(double, f64)

#if defined(__AVX512F__)
#include <immintrin.h>
#define F32_SIMD 1

/* A 64-byte store, non-temporal where ST (a literal at every call site; the address is then aligned). */
#define STORE_PS(p, v, ST) ((ST) ? _mm512_stream_ps((p), (v)) : _mm512_storeu_ps((p), (v)))
#define STORE_SI512(p, v, ST)                                                                      \
    ((ST) ? _mm512_stream_si512((void *)(p), (v)) : _mm512_storeu_si512((void *)(p), (v)))
#define STORE_SI256(p, v, ST)                                                                      \
    ((ST) ? _mm256_stream_si256((__m256i *)(p), (v)) : _mm256_storeu_si256((__m256i *)(p), (v)))

static inline __m512 sin_load(const float *s, int conj) { /* 16 sin values, negated for the conjugate */
    __m512i bits = _mm512_castps_si512(_mm512_loadu_ps(s));
    return _mm512_castsi512_ps(_mm512_xor_si512(bits, _mm512_set1_epi32(conj ? (int)0x80000000u : 0)));
}

/* 16 pairs at a time; all loads of a step come before its stores (o may be x). */
static inline void row_half_f32(const float *x, float *o, const float *c, const float *s, int64_t n,
                                int conj, int st) {
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 ck = _mm512_loadu_ps(c + k), sk = sin_load(s + k, conj);
        __m512 x1 = _mm512_loadu_ps(x + k), x2 = _mm512_loadu_ps(x + k + n);
        STORE_PS(o + k, _mm512_sub_ps(_mm512_mul_ps(x1, ck), _mm512_mul_ps(x2, sk)), st);
        STORE_PS(o + k + n, _mm512_add_ps(_mm512_mul_ps(x2, ck), _mm512_mul_ps(x1, sk)), st);
    }
    for (; k < n; k++) {
        float x1 = x[k], x2 = x[k + n], sk = conj ? -s[k] : s[k];
        o[k] = x1 * c[k] - x2 * sk;
        o[k + n] = x2 * c[k] + x1 * sk;
    }
}

static inline void row_interleaved_f32(const float *x, float *o, const float *c, const float *s, int64_t n,
                                       int conj, int st) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) { /* channels 2k … 2k + 31: pairs split into even and odd, rejoined */
        __m512 a = _mm512_loadu_ps(x + 2 * k), b = _mm512_loadu_ps(x + 2 * k + 16);
        __m512 x1 = _mm512_permutex2var_ps(a, even, b), x2 = _mm512_permutex2var_ps(a, odd, b);
        __m512 ck = _mm512_loadu_ps(c + k), sk = sin_load(s + k, conj);
        __m512 y1 = _mm512_sub_ps(_mm512_mul_ps(x1, ck), _mm512_mul_ps(x2, sk));
        __m512 y2 = _mm512_add_ps(_mm512_mul_ps(x2, ck), _mm512_mul_ps(x1, sk));
        STORE_PS(o + 2 * k, _mm512_permutex2var_ps(y1, low, y2), st);
        STORE_PS(o + 2 * k + 16, _mm512_permutex2var_ps(y1, high, y2), st);
    }
    for (; k < n; k++) {
        float x1 = x[2 * k], x2 = x[2 * k + 1], sk = conj ? -s[k] : s[k];
        o[2 * k] = x1 * c[k] - x2 * sk;
        o[2 * k + 1] = x2 * c[k] + x1 * sk;
    }
}
#else
#define F32_SIMD 0
ROW_GENERIC(float, f32)
#endif

/* ---- bfloat16 ---------------------------------------------------------------------------------- */

#if F32_SIMD && defined(__AVX512BW__) && defined(__AVX512DQ__)
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

/* With AVX512-BF16 the rounding is one instruction, but it flushes float32 denormals to ±0 where torch
 * rounds them to bfloat16's: a group holding a ±0 result (a zero, or such a denormal; both rare) is
 * redone by the integer path. */
static inline __m256i bf16x16_round(__m512 v) { /* 16 float32 -> 16 bfloat16 */
#if defined(__AVX512BF16__)
    __m256i fast = (__m256i)_mm512_cvtneps_pbh(v);
    if (__builtin_expect(!_mm256_testn_epi16_mask(fast, _mm256_set1_epi16(0x7FFF)), 1))
        return fast;
#endif
    return _mm512_cvtepi32_epi16(bf16x16_bits(v));
}

static inline __m512i bf16x32_round(__m512 lo, __m512 hi) { /* 32 float32 -> 32 bfloat16, lo first */
#if defined(__AVX512BF16__)
    __m512i fast = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    if (__builtin_expect(!_mm512_testn_epi16_mask(fast, _mm512_set1_epi16(0x7FFF)), 1))
        return fast;
#endif
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(bf16x16_bits(lo))),
                              _mm512_cvtepi32_epi16(bf16x16_bits(hi)), 1);
}

static inline __m512i bf16x16_pairs(__m512 even, __m512 odd) { /* 16 pairs (even[k], odd[k]) */
#if defined(__AVX512BF16__)
    static const uint16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __m512i fast = (__m512i)_mm512_cvtne2ps_pbh(odd, even); /* even[0..15], odd[0..15] */
    if (__builtin_expect(!_mm512_testn_epi16_mask(fast, _mm512_set1_epi16(0x7FFF)), 1))
        return _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)order), fast);
#endif
    return _mm512_or_si512(bf16x16_bits(even), _mm512_slli_epi32(bf16x16_bits(odd), 16));
}

#else
#define BF16_SIMD 0
#endif

static inline void row_half_bf16(const uint16_t *x, uint16_t *o, const float *c, const float *s, int64_t n,
                                 int conj, int st) {
    int64_t k = 0;
#if BF16_SIMD
    for (; k + 32 <= n; k += 32) { /* all loads before the stores: o may be x */
        __m512 c0 = _mm512_loadu_ps(c + k), c1 = _mm512_loadu_ps(c + k + 16);
        __m512 s0 = sin_load(s + k, conj), s1 = sin_load(s + k + 16, conj);
        __m512 a0 = bf16x16_load(x + k), a1 = bf16x16_load(x + k + 16);
        __m512 b0 = bf16x16_load(x + k + n), b1 = bf16x16_load(x + k + n + 16);
        __m512i y1 = bf16x32_round(_mm512_sub_ps(_mm512_mul_ps(a0, c0), _mm512_mul_ps(b0, s0)),
                                   _mm512_sub_ps(_mm512_mul_ps(a1, c1), _mm512_mul_ps(b1, s1)));
        __m512i y2 = bf16x32_round(_mm512_add_ps(_mm512_mul_ps(b0, c0), _mm512_mul_ps(a0, s0)),
                                   _mm512_add_ps(_mm512_mul_ps(b1, c1), _mm512_mul_ps(a1, s1)));
        STORE_SI512(o + k, y1, st);
        STORE_SI512(o + k + n, y2, st);
    }
    for (; k + 16 <= n; k += 16) {
        __m512 ck = _mm512_loadu_ps(c + k), sk = sin_load(s + k, conj);
        __m512 x1 = bf16x16_load(x + k), x2 = bf16x16_load(x + k + n);
        __m256i y1 = bf16x16_round(_mm512_sub_ps(_mm512_mul_ps(x1, ck), _mm512_mul_ps(x2, sk)));
        __m256i y2 = bf16x16_round(_mm512_add_ps(_mm512_mul_ps(x2, ck), _mm512_mul_ps(x1, sk)));
        STORE_SI256(o + k, y1, st);
        STORE_SI256(o + k + n, y2, st);
    }
#else
    (void)st;
#endif
#pragma GCC ivdep
    for (; k < n; k++) { /* the tail (all without AVX-512) */
        float x1 = bf16_load(x + k), x2 = bf16_load(x + k + n), sk = conj ? -s[k] : s[k];
        o[k] = bf16_round(x1 * c[k] - x2 * sk);
        o[k + n] = bf16_round(x2 * c[k] + x1 * sk);
    }
}

static inline void tail_interleaved_bf16(const uint16_t *x, uint16_t *o, const float *c, const float *s,
                                         int64_t n, int conj) {
    for (int64_t k = 0; k < n; k++) {
        float x1 = bf16_load(x + 2 * k), x2 = bf16_load(x + 2 * k + 1), sk = conj ? -s[k] : s[k];
        o[2 * k] = bf16_round(x1 * c[k] - x2 * sk);
        o[2 * k + 1] = bf16_round(x2 * c[k] + x1 * sk);
    }
}

static inline void row_interleaved_bf16(const uint16_t *x, uint16_t *o, const float *c, const float *s,
                                        int64_t n, int conj, int st) {
    int64_t k = 0;
#if BF16_SIMD
    const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
    for (; k + 16 <= n; k += 16) { /* 16 pairs, one 32-bit word each: channel 2k in the low half */
        __m512i pairs = _mm512_loadu_si512((const void *)(x + 2 * k));
        __m512 x1 = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
        __m512 x2 = _mm512_castsi512_ps(_mm512_and_si512(pairs, high));
        __m512 ck = _mm512_loadu_ps(c + k), sk = sin_load(s + k, conj);
        __m512 y1 = _mm512_sub_ps(_mm512_mul_ps(x1, ck), _mm512_mul_ps(x2, sk));
        __m512 y2 = _mm512_add_ps(_mm512_mul_ps(x2, ck), _mm512_mul_ps(x1, sk));
        STORE_SI512(o + 2 * k, bf16x16_pairs(y1, y2), st);
    }
#else
    (void)st;
#endif
    if (k < n) /* the tail (all of the row without AVX-512) */
        tail_interleaved_bf16(x + 2 * k, o + 2 * k, c + k, s + k, n - k, conj);
}

/* ---- the entry points --------------------------------------------------------------------------- */

#ifdef _OPENMP
#include <omp.h>
static inline int omp_thread(void) { return omp_get_thread_num(); }
#else
static inline int omp_thread(void) { return 0; }
#endif

/* Positions per block: as many as fit TABLE_BYTES of cos/sin, and few enough for every thread to get
 * blocks of its own. */
static int64_t block_rows(int64_t nb, int64_t ns, int64_t n, size_t size, int threads, int runs) {
    int64_t fit = (runs ? RUN_TABLE_BYTES : TABLE_BYTES) / (int64_t)(2 * size) / (n > 0 ? n : 1);
    int64_t share = nb * ns / (2 * (int64_t)(threads > 1 ? threads : 1));
    int64_t rows = fit < share ? fit : share;
    return rows > 1 ? rows : 1;
}

/* One row: position s of head h of batch row b, N pairs. */
#define ROW_AT(ROW, T, CONJ, ST, N)                                                                 \
    {                                                                                               \
        const T *xr = x + b * xb + h * xh + s * xs;                                                 \
        T *o = out + b * ob + h * oh + s * os;                                                      \
        ROW(xr, o, tc + (s - s0) * (N), ts + (s - s0) * (N), (N), CONJ, ST);                        \
        if (o != xr && d > 2 * (N))                                                                 \
            memcpy(o + 2 * (N), xr + 2 * (N), (size_t)(d - 2 * (N)) * sizeof(T));                   \
    }

/* The rows of one block of positions s0 … s1 − 1 of batch row b, every head, in the order the output
 * lies in memory (heads innermost when they are closer together than positions); one loop, so that
 * each row function is inlined once per width. Without long runs (see RUN_TABLE_BYTES) the row one
 * block of rows ahead (the next head's, or the next block's) is prefetched. */
#define ROWS_OF(ROW, T, CONJ, ST, N)                                                                \
    for (int64_t i = 0, h = 0, s = s0; i < nh * (s1 - s0); i++) {                                   \
        if (!heads_inner && !runs) {                                                                \
            const char *ahead =                                                                     \
                (const char *)(x + b * xb + (h + 1 < nh ? (h + 1) * xh + s * xs : (s + s1 - s0) * xs)); \
            for (size_t line = 0; line < 2 * (N) * sizeof(T); line += 64)                           \
                __builtin_prefetch(ahead + line);                                                   \
        }                                                                                           \
        ROW_AT(ROW, T, CONJ, ST, N)                                                                 \
        if (heads_inner) {                                                                          \
            if (++h == nh)                                                                          \
                h = 0, s++;                                                                         \
        } else if (++s == s1) {                                                                     \
            s = s0, h++;                                                                            \
        }                                                                                           \
    }

/* The usual widths (heads of 64, 128 and 256 channels) get rows unrolled for their N: a row is only
 * a few vectors, and a loop's bookkeeping around them costs about a fifth of the time. */
#define WIDTHS(ROW, T, CONJ, ST)                                                                    \
    switch (n) {                                                                                    \
    case 32: ROWS_OF(ROW, T, CONJ, ST, 32) break;                                                   \
    case 64: ROWS_OF(ROW, T, CONJ, ST, 64) break;                                                   \
    case 128: ROWS_OF(ROW, T, CONJ, ST, 128) break;                                                 \
    default: ROWS_OF(ROW, T, CONJ, ST, n)                                                           \
    }

#define BLOCK(ROW, T, CONJ)                                                                         \
    if (stream) {                                                                                   \
        WIDTHS(ROW, T, CONJ, 1)                                                                     \
        STREAM_FENCE();                                                                             \
    } else {                                                                                        \
        WIDTHS(ROW, T, CONJ, 0)                                                                     \
    }

#if F32_SIMD
#define STREAM_FENCE() _mm_sfence() /* the block's non-temporal stores are visible before it ends */
#else
#define STREAM_FENCE() ((void)0)
#endif

/* Whether every row of out starts on a 64-byte line and every vector store of a row fills whole
 * aligned lanes: the condition for non-temporal stores (only the AVX-512 rows make them). */
static int stream_aligned(const void *out, size_t size, int64_t n, int64_t ob, int64_t oh, int64_t os) {
    const int64_t line = 64;
    return F32_SIMD && (uintptr_t)out % line == 0 && (int64_t)(n * size) % line == 0 &&
           (int64_t)(ob * size) % line == 0 && (int64_t)(oh * size) % line == 0 &&
           (int64_t)(os * size) % line == 0;
}

#define KERNEL(NAME, ROW, T, A, C)                                                                  \
    int posenc_rope_##NAME(const T *x, T *out, const C *cos, const C *sin, int64_t nb, int64_t nh,  \
                           int64_t ns, int64_t d, int64_t n, int64_t xb, int64_t xh, int64_t xs,    \
                           int64_t ob, int64_t oh, int64_t os, int64_t cb, int conjugate,           \
                           int threads, int stream) {                                               \
        if (threads < 1)                                                                            \
            threads = 1;                                                                            \
        stream = stream && (const void *)out != (const void *)x &&                                  \
                 stream_aligned(out, sizeof(T), n, ob, oh, os);                                     \
        const int heads_inner = nh > 1 && (oh < 0 ? -oh : oh) < (os < 0 ? -os : os);               \
        const int runs = !heads_inner && sizeof(T) >= sizeof(A);                                    \
        const int convert = sizeof(A) != sizeof(C);                                                 \
        const int64_t rows = block_rows(nb, ns, n, sizeof(A), threads, runs);                       \
        const int64_t blocks = (ns + rows - 1) / rows, each = 2 * rows * n; /* table elements */    \
        A *tables = convert ? malloc((size_t)threads * (size_t)each * sizeof(A)) : NULL;            \
        if (convert && tables == NULL)                                                              \
            return 1;                                                                               \
        _Pragma("omp parallel for collapse(2) schedule(static) num_threads(threads) if(threads > 1)") \
        for (int64_t b = 0; b < nb; b++)                                                            \
            for (int64_t block = 0; block < blocks; block++) {                                      \
                const int64_t s0 = block * rows, s1 = s0 + rows < ns ? s0 + rows : ns;              \
                const C *c = cos + b * cb + s0 * n, *sn = sin + b * cb + s0 * n;                    \
                const A *tc = (const A *)c, *ts = (const A *)sn; /* A is C unless converting */     \
                if (convert) {                                                                      \
                    A *table = tables + (size_t)omp_thread() * (size_t)each;                        \
                    for (int64_t k = 0; k < (s1 - s0) * n; k++) {                                   \
                        table[k] = (A)c[k];                                                         \
                        table[rows * n + k] = (A)sn[k];                                             \
                    }                                                                               \
                    tc = table, ts = table + rows * n;                                              \
                }                                                                                   \
                if (conjugate) {                                                                    \
                    BLOCK(ROW, T, 1)                                                                \
                } else {                                                                            \
                    BLOCK(ROW, T, 0)                                                                \
                }                                                                                   \
            }                                                                                       \
        free(tables);                                                                               \
        return 0;                                                                                   \
    }

KERNEL(half_f32_f32, row_half_f32, float, float, float)
KERNEL(half_f32_f64, row_half_f32, float, float, double)
KERNEL(interleaved_f32_f32, row_interleaved_f32, float, float, float)
KERNEL(interleaved_f32_f64, row_interleaved_f32, float, float, double)
KERNEL(half_bf16_f32, row_half_bf16, uint16_t, float, float)
KERNEL(half_bf16_f64, row_half_bf16, uint16_t, float, double)
KERNEL(interleaved_bf16_f32, row_interleaved_bf16, uint16_t, float, float)
KERNEL(interleaved_bf16_f64, row_interleaved_bf16, uint16_t, float, double)
KERNEL(half_f64_f64, row_half_f64, double, double, double)
KERNEL(interleaved_f64_f64, row_interleaved_f64, double, double, double)
