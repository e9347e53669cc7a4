/* infercore's CPU kernels: paged decode attention, RMSNorm (with the residual add), SiLU-and-mul,
 * the per-head q/k RMSNorm with rotary embedding, and the KV cache write.
 *
 * Built by infercore_cpu/native.py with the system C compiler and called through ctypes (which releases
 * the GIL). Plain C, float32 arithmetic throughout; loops are written so that -O3 -march=native
 * vectorizes them (``omp simd`` reductions), and work items are spread over the OpenMP threads of the
 * calling thread when built with -fopenmp (the same libgomp torch uses, so torch.set_num_threads
 * applies). Tensors come as data pointers with element strides; dtype codes: 0 float32, 1 bfloat16.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define DT_F32 0
#define DT_BF16 1
/* Per-thread scratch limits of the decode kernel (floats): heads x head size, heads x block size. */
#define MAX_HD 8192
#define MAX_HB 8192
#define MAX_D 1024
#define MAX_H 512

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch does */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline void load_row(const void *src, int dtype, int64_t offset, float *dst, int n) {
    if (dtype == DT_F32) {
        memcpy(dst, (const float *)src + offset, (size_t)n * sizeof(float));
    } else {
        const uint16_t *s = (const uint16_t *)src + offset;
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
    }
}

static inline void store_row(void *dst, int dtype, int64_t offset, const float *src, int n) {
    if (dtype == DT_F32) {
        memcpy((float *)dst + offset, src, (size_t)n * sizeof(float));
    } else {
        uint16_t *d = (uint16_t *)dst + offset;
        for (int i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
    }
}

/* exp(x) for float32 (Cephes' expf: range reduction by ln 2 and a degree-6 polynomial, ~1 ulp), written
 * with plain arithmetic so that loops calling it vectorize (rounding by adding 1.5 * 2^23, as floorf does
 * not vectorize without -fno-trapping-math). Inputs are clamped to [-87.3, 88]: 2^n stays a normal float. */
static inline float exp_f32(float x) {
    const float shifter = 12582912.0f;
    x = x < -87.33654f ? -87.33654f : x;
    x = x > 88.0f ? 88.0f : x;
    const float n = (x * 1.44269504088896341f + shifter) - shifter;
    const float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union {
        int32_t i;
        float f;
    } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}

/* The inner loops of the decode kernel on a float32 cache, for the query heads h0 .. h0 + group of one KV
 * head and the tokens lo .. hi of one block (rows ``token_stride`` apart from ``k`` / ``v``): each head's
 * query, then its accumulator, stays in registers while the tokens stream by. ``d`` is a constant where
 * they are inlined for the common head sizes. */
static inline __attribute__((always_inline)) void block_scores_f32(const float *k, int64_t token_stride,
                                                                   const float *qf, int h0, int group, int d,
                                                                   int lo, int hi, float *scores,
                                                                   int block_size) {
    for (int h = h0; h < h0 + group; h++) {
        const float *qh = qf + h * d;
        for (int j = lo; j < hi; j++) {
            const float *kj = k + j * token_stride;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int e = 0; e < d; e++) s += qh[e] * kj[e];
            scores[h * block_size + j] = s;
        }
    }
}

static inline __attribute__((always_inline)) void block_values_f32(const float *v, int64_t token_stride,
                                                                   float *acc, int h0, int group, int d, int lo,
                                                                   int hi, const float *scores, int block_size) {
    for (int h = h0; h < h0 + group; h++) {
        float a[MAX_D];
        float *ah = acc + h * d;
        const float *ph = scores + h * block_size;
        for (int e = 0; e < d; e++) a[e] = ah[e];
        for (int j = lo; j < hi; j++) {
            const float *vj = v + j * token_stride;
            const float p = ph[j];
#pragma omp simd
            for (int e = 0; e < d; e++) a[e] += p * vj[e];
        }
        for (int e = 0; e < d; e++) ah[e] = a[e];
    }
}

#define BLOCK_LOOPS_F32(D)                                                                                   \
    for (int kvh = 0; kvh < num_kv_heads; kvh++)                                                            \
        block_scores_f32((const float *)k_cache + block * block_elems + (int64_t)kvh * (D), token_stride, qf, \
                         kvh * group, group, (D), lo, hi, scores, block_size)
#define VALUE_LOOPS_F32(D)                                                                                   \
    for (int kvh = 0; kvh < num_kv_heads; kvh++)                                                            \
        block_values_f32((const float *)v_cache + block * block_elems + (int64_t)kvh * (D), token_stride, acc, \
                         kvh * group, group, (D), lo, hi, scores, block_size)

/* Decode attention (one query token per request) straight from the paged cache.
 *
 * q/out: [rows, num_heads, head_size] with row and head strides (elements, last dim contiguous).
 * k_cache/v_cache: [num_blocks, block_size, num_kv_heads, head_size], contiguous.
 * block_table: int32 [num_reqs, bt_stride]. For request i of ``n``: its query row rows[i], its block-table
 * row req_index[i], its context length seq_lens[i]. window > 0: attend only to the last ``window``
 * positions. softcap > 0: scores become softcap * tanh(score * scale / softcap). Online softmax, one
 * block of the cache at a time, every head of a request together (so a block is read front to back;
 * the next block is prefetched). Returns 0, or -1 when a size exceeds the scratch limits (nothing
 * written). */
int infercore_paged_decode(const void *q, int q_dtype, int64_t q_row_stride, int64_t q_head_stride,
                           void *out, int64_t out_row_stride, int64_t out_head_stride,
                           const void *k_cache, const void *v_cache, int cache_dtype,
                           const int32_t *block_table, int64_t bt_stride, const int64_t *rows,
                           const int64_t *req_index, const int64_t *seq_lens, int64_t n, int num_heads,
                           int num_kv_heads, int head_size, int block_size, float scale, int64_t window,
                           float softcap) {
    const int d = head_size;
    if (num_kv_heads <= 0 || num_heads % num_kv_heads || num_heads > MAX_H || num_heads * d > MAX_HD
        || num_heads * block_size > MAX_HB || d > MAX_D)
        return -1;
    const int group = num_heads / num_kv_heads;
    const int64_t token_stride = (int64_t)num_kv_heads * d;
    const int64_t block_elems = token_stride * block_size;
    const int64_t elem_size = cache_dtype == DT_F32 ? 4 : 2;

#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; i++) {
        float qf[MAX_HD], acc[MAX_HD], scores[MAX_HB], row[MAX_D];
        float m[MAX_H], l[MAX_H];
        const int64_t seq_len = seq_lens[i];
        const int64_t start = (window > 0 && seq_len > window) ? seq_len - window : 0;
        const int32_t *blocks = block_table + req_index[i] * bt_stride;
        for (int h = 0; h < num_heads; h++) {
            load_row(q, q_dtype, rows[i] * q_row_stride + h * q_head_stride, qf + h * d, d);
            if (softcap <= 0.0f) {
#pragma omp simd
                for (int e = 0; e < d; e++) qf[h * d + e] *= scale;
            }
            m[h] = -INFINITY;
            l[h] = 0.0f;
            for (int e = 0; e < d; e++) acc[h * d + e] = 0.0f;
        }
        for (int64_t t0 = (start / block_size) * block_size; t0 < seq_len; t0 += block_size) {
            const int64_t block = blocks[t0 / block_size];
            const int lo = (int)(t0 < start ? start - t0 : 0);
            const int hi = (int)(seq_len - t0 < block_size ? seq_len - t0 : block_size);
            if (t0 + block_size < seq_len) { /* the next block, every cache line (its place is random) */
                const int64_t next = blocks[t0 / block_size + 1] * block_elems * elem_size;
                for (int64_t b = 0; b < block_elems * elem_size; b += 64) {
                    __builtin_prefetch((const char *)k_cache + next + b);
                    __builtin_prefetch((const char *)v_cache + next + b);
                }
            }
            if (cache_dtype == DT_F32 && softcap <= 0.0f && d == 64) {
                BLOCK_LOOPS_F32(64);
            } else if (cache_dtype == DT_F32 && softcap <= 0.0f && d == 128) {
                BLOCK_LOOPS_F32(128);
            } else {
                for (int j = lo; j < hi; j++) {
                    for (int kvh = 0; kvh < num_kv_heads; kvh++) {
                        const int64_t off = block * block_elems + j * token_stride + (int64_t)kvh * d;
                        const float *k;
                        if (cache_dtype == DT_F32) {
                            k = (const float *)k_cache + off;
                        } else {
                            load_row(k_cache, cache_dtype, off, row, d);
                            k = row;
                        }
                        for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                            const float *qh = qf + h * d;
                            float s = 0.0f;
#pragma omp simd reduction(+ : s)
                            for (int e = 0; e < d; e++) s += qh[e] * k[e];
                            if (softcap > 0.0f) s = softcap * tanhf(s * scale / softcap);
                            scores[h * block_size + j] = s;
                        }
                    }
                }
            }
            for (int h = 0; h < num_heads; h++) {
                float *sh = scores + h * block_size;
                float block_max = -INFINITY;
                for (int j = lo; j < hi; j++) block_max = sh[j] > block_max ? sh[j] : block_max;
                const float new_max = block_max > m[h] ? block_max : m[h];
                const float alpha = m[h] == -INFINITY ? 0.0f : exp_f32(m[h] - new_max);
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int j = lo; j < hi; j++) {
                    sh[j] = exp_f32(sh[j] - new_max);
                    sum += sh[j];
                }
                l[h] = l[h] * alpha + sum;
                m[h] = new_max;
                if (alpha != 1.0f) {
                    float *ah = acc + h * d;
#pragma omp simd
                    for (int e = 0; e < d; e++) ah[e] *= alpha;
                }
            }
            if (cache_dtype == DT_F32 && d == 64) {
                VALUE_LOOPS_F32(64);
            } else if (cache_dtype == DT_F32 && d == 128) {
                VALUE_LOOPS_F32(128);
            } else {
                for (int j = lo; j < hi; j++) {
                    for (int kvh = 0; kvh < num_kv_heads; kvh++) {
                        const int64_t off = block * block_elems + j * token_stride + (int64_t)kvh * d;
                        const float *v;
                        if (cache_dtype == DT_F32) {
                            v = (const float *)v_cache + off;
                        } else {
                            load_row(v_cache, cache_dtype, off, row, d);
                            v = row;
                        }
                        for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                            const float p = scores[h * block_size + j];
                            float *ah = acc + h * d;
#pragma omp simd
                            for (int e = 0; e < d; e++) ah[e] += p * v[e];
                        }
                    }
                }
            }
        }
        for (int h = 0; h < num_heads; h++) {
            const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
            float *ah = acc + h * d;
#pragma omp simd
            for (int e = 0; e < d; e++) ah[e] *= inv;
            store_row(out, q_dtype, rows[i] * out_row_stride + (int64_t)h * out_head_stride, ah, d);
        }
    }
    return 0;
}

/* RMSNorm over rows of float32 ``x`` [rows, width] (row stride ``x_stride``) with ``weight`` [width]:
 * out = weight * (x * rsqrt(mean(x^2) + eps)). With ``residual`` (row stride ``res_stride``), x + residual
 * is normed instead and stored in ``res_out``. ``out`` and ``res_out`` are contiguous. */
void infercore_rms_norm_f32(const float *x, int64_t x_stride, const float *residual, int64_t res_stride,
                            float *res_out, float *out, const float *weight, int64_t rows, int64_t width,
                            float eps) {
#pragma omp parallel for schedule(static) if (rows * width >= 65536)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * x_stride;
        float *o = out + r * width;
        const float *src = xr;
        if (residual != NULL) {
            const float *rr = residual + r * res_stride;
            float *ro = res_out + r * width;
#pragma omp simd
            for (int64_t c = 0; c < width; c++) ro[c] = xr[c] + rr[c];
            src = ro;
        }
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < width; c++) ss += src[c] * src[c];
        const float inv = 1.0f / sqrtf(ss / (float)width + eps);
#pragma omp simd
        for (int64_t c = 0; c < width; c++) o[c] = weight[c] * (src[c] * inv);
    }
}

/* out [rows, width] = silu(x[:, :width]) * x[:, width:] for float32 ``x`` of row stride ``x_stride``. */
void infercore_silu_and_mul_f32(const float *x, int64_t x_stride, float *out, int64_t rows, int64_t width) {
#pragma omp parallel for schedule(static) if (rows * width >= 65536)
    for (int64_t r = 0; r < rows; r++) {
        const float *gate = x + r * x_stride;
        const float *up = gate + width;
        float *o = out + r * width;
#pragma omp simd
        for (int64_t c = 0; c < width; c++) o[c] = gate[c] / (1.0f + exp_f32(-gate[c])) * up[c];
    }
}

static inline void norm_rotate_head(float *x, const float *weight, float eps, const float *cos, const float *sin,
                                    int d, int is_neox) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int e = 0; e < d; e++) ss += x[e] * x[e];
    const float inv = 1.0f / sqrtf(ss / (float)d + eps);
#pragma omp simd
    for (int e = 0; e < d; e++) x[e] = weight[e] * (x[e] * inv);
    const int half = d / 2;
    if (is_neox) {
#pragma omp simd
        for (int e = 0; e < half; e++) {
            const float x1 = x[e], x2 = x[e + half];
            x[e] = x1 * cos[e] - x2 * sin[e];
            x[e + half] = x2 * cos[e] + x1 * sin[e];
        }
    } else {
        for (int e = 0; e < half; e++) {
            const float x1 = x[2 * e], x2 = x[2 * e + 1];
            x[2 * e] = x1 * cos[e] - x2 * sin[e];
            x[2 * e + 1] = x2 * cos[e] + x1 * sin[e];
        }
    }
}

/* Qwen3's q/k prologue on float32, in place: RMSNorm every head of q [rows, q_heads * d] (row stride
 * q_stride) with q_weight and of k [rows, k_heads * d] with k_weight, then rotate both by positions
 * through cos_sin [max_position, d] (cat(cos, sin), full rotary). */
void infercore_qk_norm_rotary_f32(float *q, int64_t q_stride, int q_heads, float *k, int64_t k_stride,
                                  int k_heads, const int64_t *positions, int64_t rows, const float *q_weight,
                                  const float *k_weight, float eps, const float *cos_sin, int d, int is_neox) {
#pragma omp parallel for schedule(static) if (rows >= 64)
    for (int64_t r = 0; r < rows; r++) {
        const float *cos = cos_sin + positions[r] * d;
        const float *sin = cos + d / 2;
        for (int h = 0; h < q_heads; h++) norm_rotate_head(q + r * q_stride + h * d, q_weight, eps, cos, sin, d, is_neox);
        for (int h = 0; h < k_heads; h++) norm_rotate_head(k + r * k_stride + h * d, k_weight, eps, cos, sin, d, is_neox);
    }
}

/* Store k/v [rows, kv_heads, d] (row strides k_stride / v_stride, dtype ``src_dtype``) at cache slots
 * ``slots`` (-1: skip) of k_cache/v_cache [num_slots, kv_heads, d] (dtype ``cache_dtype``). Returns 0, or -1
 * when a row is wider than the scratch (nothing written). */
int infercore_write_kv(const void *k, int64_t k_stride, const void *v, int64_t v_stride, int src_dtype,
                        void *k_cache, void *v_cache, int cache_dtype, const int64_t *slots, int64_t rows,
                        int width) {
    float row[MAX_D * 16];
    if (width > MAX_D * 16) return -1;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t slot = slots[r];
        if (slot < 0) continue;
        if (src_dtype == cache_dtype) {
            const size_t size = cache_dtype == DT_F32 ? 4 : 2;
            memcpy((char *)k_cache + slot * width * size, (const char *)k + r * k_stride * size, width * size);
            memcpy((char *)v_cache + slot * width * size, (const char *)v + r * v_stride * size, width * size);
        } else {
            load_row(k, src_dtype, r * k_stride, row, width);
            store_row(k_cache, cache_dtype, slot * width, row, width);
            load_row(v, src_dtype, r * v_stride, row, width);
            store_row(v_cache, cache_dtype, slot * width, row, width);
        }
    }
    return 0;
}
