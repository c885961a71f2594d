# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The per-step loops of an episode, compiled: frame differences, the sparse forward pass,
and the gradient sums.

An env step of Pong costs ~230 us in the emulator; as numpy calls (a dozen of ~1 us
overhead each on a few dozen elements) the work around it took ~40 us, and takes a few us
here. `policy.py` keeps the dense float64 reference, which tests check these loops against.
Cython, not numba: loading LLVM puts ~150 MB into every worker's RSS, its whole budget.

The rules that keep results reproducible:
- every sum is added in the order written here (compiled with -ffp-contract=off and no
  fast-math), so the same inputs give the same bytes on every worker, CPU and Ray node;
- arguments are C-contiguous arrays of fixed dtypes: int32 pixel indices, float32 values,
  weights and hidden units, float64 sums.
"""

from libc.math cimport exp, fabs, log1p, sqrt
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset

import numpy as np

UNSEEN = 2
"""An entry of `palette_diff`'s table for a pair of palette indices not met yet."""

cdef int8_t _UNSEEN = UNSEEN


def palette_diff(
    const uint8_t[::1] cur,
    const uint8_t[::1] prev,
    const int8_t[:, ::1] change,
    int32_t[::1] idx,
    float[::1] vals,
) -> int:
    """Write the pixels whose colour class changed from `prev` to `cur` (uint8 palette
    indices, a multiple of 8 of them) into `idx` and their signs into `vals`; return how
    many, or -1 where `change[a, b]` (binary(b) - binary(a), int8) is still UNSEEN."""
    cdef Py_ssize_t n = 0, w, p
    cdef uint64_t now, before
    cdef int8_t c
    if cur.shape[0] != prev.shape[0] or cur.shape[0] % 8 or idx.shape[0] < cur.shape[0] \
            or vals.shape[0] < cur.shape[0] or change.shape[0] < 256 or change.shape[1] < 256:
        raise ValueError("palette_diff: arrays of mismatched sizes")
    for w in range(0, cur.shape[0], 8):
        # Eight pixels at a time: between two frames, most words are equal.
        memcpy(&now, &cur[w], 8)
        memcpy(&before, &prev[w], 8)
        if now == before:
            continue
        for p in range(w, w + 8):
            if cur[p] == prev[p]:
                continue
            c = change[prev[p], cur[p]]
            if c == _UNSEEN:
                return -1
            if c != 0:
                idx[n] = <int32_t>p
                vals[n] = c
                n += 1
    return n


cdef inline double _sigmoid(double x):
    # exp overflows only for x < -709; then the sigmoid is 0 for all practical purposes.
    return 1.0 / (1.0 + exp(-x)) if x > -700.0 else 0.0


cdef double _logit(
    const float[:, ::1] w1t,
    const float[::1] w2,
    const int32_t[::1] idx,
    const float[::1] vals,
    Py_ssize_t first,
    Py_ssize_t last,
    float* h,
):
    # The hidden units of the input idx[first:last] (after the relu) into h, and the logit
    # of P(UP), added in this order; the caller has checked the sizes and the pixels.
    cdef Py_ssize_t hidden = w2.shape[0], j, k
    cdef const float* row
    cdef float v
    cdef double logit = 0.0
    for k in range(hidden):
        h[k] = 0.0
    for j in range(first, last):
        row = &w1t[idx[j], 0]
        v = vals[j]
        for k in range(hidden):
            h[k] += v * row[k]
    for k in range(hidden):
        if h[k] < 0.0:
            h[k] = 0.0
        logit += h[k] * w2[k]
    return logit


cdef void _check_pixels(const int32_t[::1] idx, Py_ssize_t count, Py_ssize_t pixels,
                        str name) except *:
    cdef Py_ssize_t j
    for j in range(count):
        if not 0 <= idx[j] < pixels:
            raise IndexError(f"{name}: pixel {idx[j]} out of range")


cdef void _check_csr(const int32_t[::1] idx, const float[::1] vals, const int64_t[::1] indptr,
                     Py_ssize_t count, Py_ssize_t pixels, str name) except *:
    # The entries of steps < count (count < len(indptr), checked by the caller), all inside
    # idx and vals, and their pixels.
    if not 0 <= indptr[count] <= min(idx.shape[0], vals.shape[0]):
        raise ValueError(f"{name}: indptr points outside idx")
    _check_pixels(idx, indptr[count], pixels, name)


def forward(
    const float[:, ::1] w1t,
    const float[::1] w2,
    const int32_t[::1] idx,
    const float[::1] vals,
    float[::1] h,
    bint logit=False,
) -> float:
    """P(UP) for the input with values `vals` at pixels `idx`, or with `logit` its logit (of
    which P(UP) is the sigmoid); the hidden units (after the relu) are written into `h`."""
    if w1t.shape[1] != w2.shape[0] or h.shape[0] != w2.shape[0] \
            or vals.shape[0] < idx.shape[0]:
        raise ValueError("forward: arrays of mismatched sizes")
    _check_pixels(idx, idx.shape[0], w1t.shape[0], "forward")
    cdef double z = _logit(w1t, w2, idx, vals, 0, idx.shape[0], &h[0] if h.shape[0] else NULL)
    return z if logit else _sigmoid(z)


cdef class _ByPixel:
    # The entries of steps < count of checked CSR inputs grouped by pixel (a counting sort),
    # in step order within a pixel: pixel p's are step_of/sign[first[p]:first[p + 1]].
    cdef int64_t[::1] first
    cdef int32_t[::1] step_of
    cdef double[::1] sign

    def __cinit__(self, const int32_t[::1] idx, const float[::1] vals,
                  const int64_t[::1] indptr, Py_ssize_t count, Py_ssize_t pixels):
        cdef Py_ssize_t t, j, p, entries = indptr[count]
        self.first = np.zeros(pixels + 1, np.int64)
        self.step_of = np.empty(max(entries, 1), np.int32)
        self.sign = np.empty(max(entries, 1), np.float64)
        for j in range(entries):
            self.first[idx[j] + 1] += 1
        for p in range(pixels):
            self.first[p + 1] += self.first[p]
        cdef int64_t[::1] fill = self.first.copy()
        for t in range(count):
            for j in range(indptr[t], indptr[t + 1]):
                p = idx[j]
                self.step_of[fill[p]] = <int32_t>t
                self.sign[fill[p]] = vals[j]
                fill[p] += 1


def accumulate(
    const int32_t[::1] idx,
    const float[::1] vals,
    const int64_t[::1] indptr,
    const float[:, ::1] hs,
    const float[::1] w2,
    Py_ssize_t count,
    const double[::1] coef_a,
    const double[::1] coef_b,
    double[::1] out_a,
    double[::1] out_b,
    uint8_t[::1] touched,
) -> None:
    """Add to the flat float64 vectors `out_a` and `out_b` the gradients of
    sum_t coef_a[t] * logit_t and sum_t coef_b[t] * logit_t over steps t < `count` of the CSR
    inputs (idx, vals, indptr), hs[t] their hidden units. Only the W1 rows of pixels that
    occur are written (marked in `touched`), each summed in step order and added once."""
    cdef Py_ssize_t hidden = w2.shape[0], pixels = touched.shape[0]
    cdef Py_ssize_t base = pixels * hidden  # W2's offset in the flat vectors
    cdef Py_ssize_t t, k, p, q, row
    cdef double ca, cb, hk
    cdef _ByPixel by
    if not (0 <= count <= hs.shape[0] and count < indptr.shape[0] and hs.shape[1] == hidden
            and coef_a.shape[0] >= count and coef_b.shape[0] >= count
            and out_a.shape[0] == (pixels + 1) * hidden and out_b.shape[0] == out_a.shape[0]):
        raise ValueError("accumulate: arrays of mismatched sizes")
    _check_csr(idx, vals, indptr, count, pixels, "accumulate")
    cdef float[::1] dh_room = np.empty(max(count * hidden, 1), np.float32)
    cdef double[:, ::1] sums = np.empty((2, max(hidden, 1)))
    cdef float* dh = &dh_room[0]
    cdef double* sum_a = &sums[0, 0]
    cdef double* sum_b = &sums[1, 0]
    # d logit / d h where the relu lets it through; and the W2 gradient, h itself.
    for t in range(count):
        ca = coef_a[t]
        cb = coef_b[t]
        for k in range(hidden):
            hk = hs[t, k]
            out_a[base + k] += ca * hk
            out_b[base + k] += cb * hk
            dh[t * hidden + k] = w2[k] if hk > 0.0 else 0.0
    by = _ByPixel(idx, vals, indptr, count, pixels)
    for p in range(pixels):
        if by.first[p] == by.first[p + 1]:
            continue
        touched[p] = 1
        for k in range(hidden):
            sum_a[k] = 0.0
            sum_b[k] = 0.0
        for q in range(by.first[p], by.first[p + 1]):
            t = by.step_of[q]
            ca = coef_a[t] * by.sign[q]
            cb = coef_b[t] * by.sign[q]
            for k in range(hidden):
                sum_a[k] += ca * dh[t * hidden + k]
                sum_b[k] += cb * dh[t * hidden + k]
        row = p * hidden
        for k in range(hidden):
            out_a[row + k] += sum_a[k]
            out_b[row + k] += sum_b[k]


def finish(
    double[::1] a,
    double[::1] b,
    uint8_t[::1] touched,
    double mu,
    double scale,
    float[::1] out,
) -> None:
    """Write (a - mu * b) * scale into the flat float32 `out` (zeros in W1 rows not
    `touched`), and leave `a`, `b` and `touched` all zero for the next episode."""
    cdef Py_ssize_t pixels = touched.shape[0]
    cdef Py_ssize_t hidden = a.shape[0] // (pixels + 1)  # W1 (pixels rows) and W2 (one row)
    cdef Py_ssize_t p, k, row
    if a.shape[0] != (pixels + 1) * hidden or b.shape[0] != a.shape[0] \
            or out.shape[0] != a.shape[0]:
        raise ValueError("finish: arrays of mismatched sizes")
    for p in range(pixels + 1):  # row `pixels` is W2, always written
        row = p * hidden
        if p == pixels or touched[p]:
            for k in range(row, row + hidden):
                out[k] = <float>((a[k] - mu * b[k]) * scale)
                a[k] = 0.0
                b[k] = 0.0
            if p < pixels:
                touched[p] = 0
        else:
            for k in range(row, row + hidden):
                out[k] = 0.0


cdef inline double _value(const float* h, const float[::1] head, Py_ssize_t hidden):
    cdef Py_ssize_t k
    cdef double total = 0.0
    for k in range(hidden):
        total += <double>head[k] * h[k]
    return total + head[hidden]


def value(const float[::1] h, const float[::1] head) -> float:
    """The value head's estimate for hidden units `h`: head[hidden] (the bias) plus
    sum_k head[k] * h[k], added in k order in float64."""
    if head.shape[0] != h.shape[0] + 1:
        raise ValueError("value: arrays of mismatched sizes")
    return _value(&h[0] if h.shape[0] else NULL, head, h.shape[0])


# -- the actor-critic's loops over a stored trajectory (ppo.py) ------------------------------


def forward_many(
    const float[:, ::1] w1t,
    const float[::1] w2,
    const float[::1] head,
    const int32_t[::1] idx,
    const float[::1] vals,
    const int64_t[::1] indptr,
    Py_ssize_t count,
    float[:, ::1] hs,
    double[::1] logits,
    double[::1] values,
) -> None:
    """For steps t < `count` of CSR inputs (idx, vals, indptr): the hidden units into hs[t],
    the logit of P(UP) into logits[t] and the value head's estimate into values[t], each
    added in the order `forward` (its logit) and `value` add."""
    cdef Py_ssize_t hidden = w2.shape[0], t
    if not (w1t.shape[1] == hidden and head.shape[0] == hidden + 1 and hs.shape[1] == hidden
            and 0 <= count <= hs.shape[0] and count < indptr.shape[0]
            and logits.shape[0] >= count and values.shape[0] >= count):
        raise ValueError("forward_many: arrays of mismatched sizes")
    _check_csr(idx, vals, indptr, count, w1t.shape[0], "forward_many")
    for t in range(count):
        logits[t] = _logit(w1t, w2, idx, vals, indptr[t], indptr[t + 1], &hs[t, 0])
        values[t] = _value(&hs[t, 0], head, hidden)


cdef inline double _softplus(double x):
    # log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
    return (x if x > 0.0 else 0.0) + log1p(exp(-fabs(x)))


cdef enum:
    DOWN_CODE = 0
    UP_CODE = 1


def log_prob(double logit, int action) -> float:
    """log pi(action | logit) of the two-action policy, action 1 UP or 0 DOWN:
    -softplus(-logit) for UP, -softplus(logit) for DOWN (finite for any finite logit)."""
    if not (action == UP_CODE or action == DOWN_CODE):
        raise ValueError(f"log_prob: no action {action}")
    return -_softplus(-logit) if action == UP_CODE else -_softplus(logit)


def ppo_coefficients(
    const double[::1] logits,
    const double[::1] values,
    const uint8_t[::1] actions,
    const double[::1] logp_old,
    const double[::1] advantages,
    const double[::1] returns,
    double clip,
    double value_coef,
    double entropy_coef,
    double[::1] coef_logit,
    double[::1] coef_value,
) -> tuple:
    """The clipped surrogate's per-step derivatives, for steps t < len(logits): of
    min(r A, clip(r, 1 - clip, 1 + clip) A) - value_coef / 2 (V - R)^2 + entropy_coef H(p),
    r = pi(a) / pi_old(a) (a: 1 UP, 0 DOWN), w.r.t. the logit into coef_logit and V into
    coef_value. Returns (steps whose ratio left 1 +- clip, CleanRL's and SB3's clip fraction;
    sum of entropies, of (V - R)^2, of logp_old - logp)."""
    cdef Py_ssize_t n = logits.shape[0], t, clipped = 0
    cdef double z, p, logp, ratio, adv, grad, err, ent, entropy_sum = 0.0
    cdef double error_sum = 0.0, kl_sum = 0.0
    cdef int a
    if not (values.shape[0] == n and actions.shape[0] == n and logp_old.shape[0] == n
            and advantages.shape[0] == n and returns.shape[0] == n
            and coef_logit.shape[0] >= n and coef_value.shape[0] >= n):
        raise ValueError("ppo_coefficients: arrays of mismatched sizes")
    for t in range(n):
        if actions[t] > UP_CODE:
            raise ValueError(f"ppo_coefficients: no action {actions[t]}")
    for t in range(n):
        z = logits[t]
        a = actions[t]
        logp = -_softplus(-z) if a == UP_CODE else -_softplus(z)
        p = _sigmoid(z)
        ratio = exp(logp - logp_old[t])
        adv = advantages[t]
        # The min takes the clipped term, whose slope in r is 0, only where the ratio has
        # left the interval in the direction the advantage pushes it.
        if fabs(ratio - 1.0) > clip:
            clipped += 1
        if (adv > 0.0 and ratio > 1.0 + clip) or (adv < 0.0 and ratio < 1.0 - clip):
            grad = 0.0
        else:
            grad = adv * ratio * ((1.0 if a == UP_CODE else 0.0) - p)
        ent = 0.0
        if 0.0 < p < 1.0:
            ent = -p * (-_softplus(-z)) - (1.0 - p) * (-_softplus(z))
            grad += entropy_coef * (-z * p * (1.0 - p))
        coef_logit[t] = grad
        err = values[t] - returns[t]
        coef_value[t] = -value_coef * err
        entropy_sum += ent
        error_sum += err * err
        kl_sum += logp_old[t] - logp
    return clipped, entropy_sum, error_sum, kl_sum


cdef extern from *:
    """
    #ifdef __AVX__
    #include <immintrin.h>
    #endif

    /* One row of W1's gradient: the sum over entries q < m, in q order, of
       sign[q] * dh[step[q]] (rows of n float64), each element added in float64 from 0.0,
       written as float32 into out; `total` is n float64 of scratch. Where the build has AVX,
       sixteen elements at a time stay in registers over all the entries; elsewhere the
       row's sums are added entry by entry. Either way each element gets the same additions
       in the same order. */
    static void pong_mp_signed_row(const double *dh, Py_ssize_t n, const int32_t *step,
                                   const double *sign, Py_ssize_t m, double *total,
                                   float *out)
    {
        Py_ssize_t k = 0, q;
    #ifdef __AVX__
        for (; k + 16 <= n; k += 16) {
            __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
            __m256d a2 = _mm256_setzero_pd(), a3 = _mm256_setzero_pd();
            for (q = 0; q < m; q++) {
                const double *r = dh + (Py_ssize_t)step[q] * n + k;
                __m256d s = _mm256_set1_pd(sign[q]);
                a0 = _mm256_add_pd(a0, _mm256_mul_pd(s, _mm256_loadu_pd(r)));
                a1 = _mm256_add_pd(a1, _mm256_mul_pd(s, _mm256_loadu_pd(r + 4)));
                a2 = _mm256_add_pd(a2, _mm256_mul_pd(s, _mm256_loadu_pd(r + 8)));
                a3 = _mm256_add_pd(a3, _mm256_mul_pd(s, _mm256_loadu_pd(r + 12)));
            }
            _mm_storeu_ps(out + k, _mm256_cvtpd_ps(a0));
            _mm_storeu_ps(out + k + 4, _mm256_cvtpd_ps(a1));
            _mm_storeu_ps(out + k + 8, _mm256_cvtpd_ps(a2));
            _mm_storeu_ps(out + k + 12, _mm256_cvtpd_ps(a3));
        }
    #endif
        Py_ssize_t first = k;
        for (; k < n; k++)
            total[k] = 0.0;
        for (q = 0; q < m; q++) {
            const double *r = dh + (Py_ssize_t)step[q] * n;
            double s = sign[q];
            for (k = first; k < n; k++)
                total[k] += s * r[k];
        }
        for (k = first; k < n; k++)
            out[k] = (float)total[k];
    }
    """
    void pong_mp_signed_row(const double* dh, Py_ssize_t n, const int32_t* step,
                            const double* sign, Py_ssize_t m, double* total, float* out) nogil


def ppo_accumulate(
    const int32_t[::1] idx,
    const float[::1] vals,
    const int64_t[::1] indptr,
    const float[:, ::1] hs,
    const float[::1] w2,
    const float[::1] head,
    const double[::1] coef_logit,
    const double[::1] coef_value,
    Py_ssize_t count,
    float[::1] out,
    double[::1] out_value,
    double[:, ::1] dh_out,
    unsigned char[::1] zeroed=None,
) -> None:
    """Write into the flat float32 `out` (W1 transposed, then W2) the policy gradient of
    sum_t coef_logit[t] * logit_t + coef_value[t] * V_t over steps t < `count` (a shared
    trunk), and add the value head's (weights, then the bias) to `out_value`. Each W1 row is
    summed in float64 in step order, as `accumulate` sums it; rows of inputs that do not
    occur are zeros. The gradient w.r.t. each step's hidden units before the relu goes into
    dh_out (count x hidden, for --policy conv's layer below).

    `zeroed` (a flag per W1 row, kept with `out`) marks the rows of `out` known to be all
    +0.0: such a row that no input touches is left as it is instead of cleared, and the flags
    are brought up to date (`add_float32` reads them)."""
    cdef Py_ssize_t hidden = w2.shape[0], rows = out.shape[0] // max(hidden, 1) - 1
    cdef Py_ssize_t base = rows * hidden
    cdef Py_ssize_t t, k, p, q, row
    cdef double cz, cv, hk
    cdef _ByPixel by
    if not (hidden > 0 and 0 <= count <= hs.shape[0] and count < indptr.shape[0]
            and hs.shape[1] == hidden and head.shape[0] == hidden + 1
            and coef_logit.shape[0] >= count and coef_value.shape[0] >= count
            and out.shape[0] == (rows + 1) * hidden and out_value.shape[0] == hidden + 1):
        raise ValueError("ppo_accumulate: arrays of mismatched sizes")
    if not (dh_out.shape[0] >= count and dh_out.shape[1] == hidden):
        raise ValueError("ppo_accumulate: dh_out of the wrong shape")
    if zeroed is not None and zeroed.shape[0] != rows:
        raise ValueError("ppo_accumulate: a zeroed flag for each W1 row, no more, no fewer")
    cdef unsigned char* flags = &zeroed[0] if zeroed is not None and rows else NULL
    _check_csr(idx, vals, indptr, count, rows, "ppo_accumulate")
    cdef double[::1] total_room = np.zeros(hidden)
    cdef double* dh = &dh_out[0, 0]
    cdef double* total = &total_room[0]
    # W2 and the value head: h itself; d objective / d h where the relu lets it through.
    for t in range(count):
        cz = coef_logit[t]
        cv = coef_value[t]
        for k in range(hidden):
            hk = hs[t, k]
            total[k] += cz * hk
            out_value[k] += cv * hk
            dh[t * hidden + k] = cz * w2[k] + cv * head[k] if hk > 0.0 else 0.0
        out_value[hidden] += cv
    for k in range(hidden):
        out[base + k] = <float>total[k]
    by = _ByPixel(idx, vals, indptr, count, rows)
    for p in range(rows):
        row = p * hidden
        if by.first[p] == by.first[p + 1]:
            if flags == NULL or not flags[p]:
                memset(&out[row], 0, hidden * sizeof(float))
                if flags != NULL:
                    flags[p] = 1  # only once the row is zero: a worker may die at any point
            continue
        if flags != NULL:
            flags[p] = 0  # before the row is written, for the same reason
        q = by.first[p]
        pong_mp_signed_row(dh, hidden, &by.step_of[q], &by.sign[q], by.first[p + 1] - q,
                           total, &out[row])


# -- --policy conv's first layer: a convolution of the sparse input -------------------------
# Its filters (CONV_SIZE x CONV_SIZE x channels, stride CONV_STRIDE, no bias) see a frame
# difference's ~30 pixels only: each pixel reaches at most 2 x 2 positions, so a step costs
# ~30 x 4 x channels multiply-adds, and only positions near a pixel can be non-zero. Its
# features (after the relu) come out sparse, in the CSR form the MLP's loops take as their
# input, feature (row * side + column) * channels + channel, in increasing order.

cdef enum:
    _SIZE = 8
    _STRIDE = 4
    _SIDE = 19
    _WIDTH = 80


cdef inline void _window_range(Py_ssize_t y, Py_ssize_t* lo, Py_ssize_t* hi):
    # The positions (along one axis) whose window covers pixel coordinate y.
    lo[0] = (y - _SIZE + _STRIDE) // _STRIDE if y >= _SIZE else 0
    hi[0] = y // _STRIDE if y // _STRIDE < _SIDE else _SIDE - 1


cdef inline Py_ssize_t _windows(int32_t pixel, Py_ssize_t* positions, Py_ssize_t* taps):
    # The positions whose window covers `pixel` (at most 2 x 2, row by row), and for each
    # the tap of the filter that sees it (its offset in the window, dy * _SIZE + dx).
    cdef Py_ssize_t y = pixel // _WIDTH, x = pixel % _WIDTH, ylo, yhi, xlo, xhi, oy, ox
    cdef Py_ssize_t n = 0
    _window_range(y, &ylo, &yhi)
    _window_range(x, &xlo, &xhi)
    for oy in range(ylo, yhi + 1):
        for ox in range(xlo, xhi + 1):
            positions[n] = oy * _SIDE + ox
            taps[n] = (y - oy * _STRIDE) * _SIZE + (x - ox * _STRIDE)
            n += 1
    return n


cdef Py_ssize_t _conv_step(
    const float[:, :, ::1] kernel,
    const int32_t[::1] idx,
    const float[::1] vals,
    Py_ssize_t first,
    Py_ssize_t last,
    float* pre,
    uint8_t* seen,
    int32_t* positions,
    int32_t* out_idx,
    float* out_vals,
):
    # The non-zero features of input idx[first:last] into out_idx/out_vals; returns their
    # count. `pre` (side^2 x channels) and `seen` (side^2) come zeroed and are left so.
    cdef Py_ssize_t channels = kernel.shape[2], j, w, windows, a, b
    cdef Py_ssize_t c, pos, n_pos = 0, n = 0
    cdef Py_ssize_t at[4]
    cdef Py_ssize_t tap[4]
    cdef const float* filters = &kernel[0, 0, 0]
    cdef const float* row
    cdef float* dst
    cdef float v
    cdef int32_t keep
    for j in range(first, last):
        v = vals[j]
        windows = _windows(idx[j], at, tap)
        for w in range(windows):
            pos = at[w]
            if not seen[pos]:
                seen[pos] = 1
                positions[n_pos] = <int32_t>pos
                n_pos += 1
            row = &filters[tap[w] * channels]
            dst = &pre[pos * channels]
            for c in range(channels):
                dst[c] += v * row[c]
    # The positive sums of the touched positions, feature position * channels + channel in
    # increasing order; `pre` and `seen` cleared there.
    for a in range(1, n_pos):  # insertion sort: a few dozen positions
        keep = positions[a]
        b = a - 1
        while b >= 0 and positions[b] > keep:
            positions[b + 1] = positions[b]
            b -= 1
        positions[b + 1] = keep
    for a in range(n_pos):
        pos = positions[a]
        seen[pos] = 0
        dst = &pre[pos * channels]
        for c in range(channels):
            if dst[c] > 0.0:
                out_idx[n] = <int32_t>(pos * channels + c)
                out_vals[n] = dst[c]
                n += 1
            dst[c] = 0.0
    return n


cdef void _check_kernel(const float[:, :, ::1] kernel, str name) except *:
    if kernel.shape[0] != _SIZE or kernel.shape[1] != _SIZE or kernel.shape[2] < 1:
        raise ValueError(f"{name}: filters must be {_SIZE} x {_SIZE} x channels")


def conv_step(
    const float[:, :, ::1] kernel,
    const int32_t[::1] idx,
    const float[::1] vals,
    int32_t[::1] out_idx,
    float[::1] out_vals,
    float[::1] pre,
    uint8_t[::1] seen,
) -> int:
    """The non-zero features of one sparse input (values `vals` at pixels `idx`) into
    out_idx/out_vals (room for side^2 x channels each); returns how many. `pre` (side^2 x
    channels) and `seen` (side^2) are zeroed scratch the call leaves zeroed."""
    cdef Py_ssize_t channels = kernel.shape[2]
    cdef int32_t positions[_SIDE * _SIDE]
    _check_kernel(kernel, "conv_step")
    if vals.shape[0] < idx.shape[0] or out_idx.shape[0] < _SIDE * _SIDE * channels \
            or out_vals.shape[0] < _SIDE * _SIDE * channels \
            or pre.shape[0] != _SIDE * _SIDE * channels or seen.shape[0] != _SIDE * _SIDE:
        raise ValueError("conv_step: arrays of mismatched sizes")
    _check_pixels(idx, idx.shape[0], _WIDTH * _WIDTH, "conv_step")
    return _conv_step(kernel, idx, vals, 0, idx.shape[0], &pre[0], &seen[0], positions,
                      &out_idx[0], &out_vals[0])


def conv_many(
    const float[:, :, ::1] kernel,
    const int32_t[::1] idx,
    const float[::1] vals,
    const int64_t[::1] indptr,
    Py_ssize_t count,
):
    """The non-zero features of steps t < `count` of CSR inputs (idx, vals, indptr), each
    as `conv_step` computes them: (int32 features, float32 values, int64 indptr)."""
    cdef Py_ssize_t channels = kernel.shape[2], t, n = 0, room
    cdef Py_ssize_t step_room = _SIDE * _SIDE * channels
    cdef int32_t positions[_SIDE * _SIDE]
    _check_kernel(kernel, "conv_many")
    if not (0 <= count < indptr.shape[0]):
        raise ValueError("conv_many: arrays of mismatched sizes")
    _check_csr(idx, vals, indptr, count, _WIDTH * _WIDTH, "conv_many")
    # A pixel reaches at most 4 positions: room for every feature of those, or of all.
    room = min(4 * channels * indptr[count], step_room * count) + 1
    out_idx = np.empty(room, np.int32)
    out_vals = np.empty(room, np.float32)
    out_indptr = np.zeros(count + 1, np.int64)
    cdef int32_t[::1] oi = out_idx
    cdef float[::1] ov = out_vals
    cdef int64_t[::1] op = out_indptr
    cdef float[::1] pre = np.zeros(step_room, np.float32)  # zeroed scratch, left zeroed
    cdef uint8_t[::1] seen = np.zeros(_SIDE * _SIDE, np.uint8)
    for t in range(count):
        n += _conv_step(kernel, idx, vals, indptr[t], indptr[t + 1], &pre[0], &seen[0],
                        positions, &oi[n], &ov[n])
        op[t + 1] = n
    return out_idx[:n], out_vals[:n], out_indptr


cdef extern from *:
    """
    /* The dot products of rows of a float32 matrix with one float64 vector, each added in
       float64 in the order of the row's elements from 0.0: the scalar loop's bits. Where the
       build has AVX, eight rows at a time, their elements transposed into vectors of four
       (one row a lane), so that eight sums advance at once and none is reordered;
       elsewhere four rows at a time, as four scalar sums. */
    #ifdef __AVX__
    #include <immintrin.h>

    /* Elements k..k+3 of rows r[0..3], as four vectors across the rows (one per element),
       widened to float64. */
    static inline void pong_mp_columns(const float *const *r, Py_ssize_t k, __m256d *c)
    {
        __m128 x0 = _mm_loadu_ps(r[0] + k), x1 = _mm_loadu_ps(r[1] + k);
        __m128 x2 = _mm_loadu_ps(r[2] + k), x3 = _mm_loadu_ps(r[3] + k);
        _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
        c[0] = _mm256_cvtps_pd(x0);
        c[1] = _mm256_cvtps_pd(x1);
        c[2] = _mm256_cvtps_pd(x2);
        c[3] = _mm256_cvtps_pd(x3);
    }
    #endif

    /* out[rows[e]] = sum over k < n of matrix[rows[e]][k] * d[k], for e < count. */
    static void pong_mp_row_dots(const float *matrix, Py_ssize_t n, const int32_t *rows,
                                 Py_ssize_t count, const double *d, double *out)
    {
        Py_ssize_t e = 0, k;
    #ifdef __AVX__
        for (; e + 8 <= count; e += 8) {
            const float *r[8];
            for (int j = 0; j < 8; j++)
                r[j] = matrix + (Py_ssize_t)rows[e + j] * n;
            __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
            for (k = 0; k + 4 <= n; k += 4) {
                __m256d ca[4], cb[4];
                pong_mp_columns(r, k, ca);
                pong_mp_columns(r + 4, k, cb);
                for (int i = 0; i < 4; i++) {
                    __m256d dk = _mm256_set1_pd(d[k + i]);
                    a = _mm256_add_pd(a, _mm256_mul_pd(ca[i], dk));
                    b = _mm256_add_pd(b, _mm256_mul_pd(cb[i], dk));
                }
            }
            for (; k < n; k++) {
                __m256d dk = _mm256_set1_pd(d[k]);
                __m256d ca = _mm256_set_pd(r[3][k], r[2][k], r[1][k], r[0][k]);
                __m256d cb = _mm256_set_pd(r[7][k], r[6][k], r[5][k], r[4][k]);
                a = _mm256_add_pd(a, _mm256_mul_pd(ca, dk));
                b = _mm256_add_pd(b, _mm256_mul_pd(cb, dk));
            }
            double sa[4], sb[4];
            _mm256_storeu_pd(sa, a);
            _mm256_storeu_pd(sb, b);
            for (int j = 0; j < 4; j++) {
                out[rows[e + j]] = sa[j];
                out[rows[e + 4 + j]] = sb[j];
            }
        }
    #endif
        for (; e + 4 <= count; e += 4) {
            const float *r0 = matrix + (Py_ssize_t)rows[e] * n;
            const float *r1 = matrix + (Py_ssize_t)rows[e + 1] * n;
            const float *r2 = matrix + (Py_ssize_t)rows[e + 2] * n;
            const float *r3 = matrix + (Py_ssize_t)rows[e + 3] * n;
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            for (k = 0; k < n; k++) {
                s0 += r0[k] * d[k];
                s1 += r1[k] * d[k];
                s2 += r2[k] * d[k];
                s3 += r3[k] * d[k];
            }
            out[rows[e]] = s0;
            out[rows[e + 1]] = s1;
            out[rows[e + 2]] = s2;
            out[rows[e + 3]] = s3;
        }
        for (; e < count; e++) {
            const float *row = matrix + (Py_ssize_t)rows[e] * n;
            double total = 0.0;
            for (k = 0; k < n; k++)
                total += row[k] * d[k];
            out[rows[e]] = total;
        }
    }
    """
    void pong_mp_row_dots(const float* matrix, Py_ssize_t n, const int32_t* rows,
                          Py_ssize_t count, const double* d, double* out) nogil


def conv_backward(
    const float[:, ::1] w1t,
    const int32_t[::1] idx,
    const float[::1] vals,
    const int64_t[::1] indptr,
    const int32_t[::1] fidx,
    const int64_t[::1] findptr,
    const double[:, ::1] dh,
    Py_ssize_t count,
    double[:, :, ::1] out,
) -> None:
    """Add to `out` (the filters' shape) the gradient w.r.t. the filters of sum_t dh[t] . h_t
    over steps t < `count`, h_t the hidden units (before their relu) of input t's features
    fidx[findptr[t]:findptr[t + 1]] (of idx, vals, indptr), with W1 transposed `w1t`."""
    cdef Py_ssize_t hidden = w1t.shape[1], channels = out.shape[2]
    cdef Py_ssize_t t, j, e, w, c, windows
    cdef Py_ssize_t at[4]
    cdef Py_ssize_t taps[4]
    cdef double v
    cdef double[::1] scratch
    cdef double* grad
    cdef double* sums
    cdef double* dst
    cdef const double* src
    cdef const double* d
    if not (out.shape[0] == _SIZE and out.shape[1] == _SIZE and channels >= 1
            and w1t.shape[0] == _SIDE * _SIDE * channels and dh.shape[1] == hidden
            and 0 <= count <= dh.shape[0] and count < indptr.shape[0]
            and count < findptr.shape[0]):
        raise ValueError("conv_backward: arrays of mismatched sizes")
    if not 0 <= findptr[count] <= fidx.shape[0]:
        raise ValueError("conv_backward: indptr points outside idx")
    _check_csr(idx, vals, indptr, count, _WIDTH * _WIDTH, "conv_backward")
    _check_pixels(fidx, findptr[count], w1t.shape[0], "conv_backward")
    sums = &out[0, 0, 0]
    scratch = np.zeros(_SIDE * _SIDE * channels)  # each feature's gradient, zero between steps
    grad = &scratch[0]
    for t in range(count):
        d = &dh[t, 0]
        e = findptr[t]
        pong_mp_row_dots(&w1t[0, 0], hidden, &fidx[e], findptr[t + 1] - e, d, grad)
        for j in range(indptr[t], indptr[t + 1]):
            v = vals[j]
            windows = _windows(idx[j], at, taps)
            for w in range(windows):
                dst = &sums[taps[w] * channels]
                src = &grad[at[w] * channels]
                for c in range(channels):
                    dst[c] += v * src[c]
        for e in range(findptr[t], findptr[t + 1]):
            grad[fidx[e]] = 0.0


# -- the coordinator's loops over the flat parameters (optim.py, batch_sum.py) ---------------
# Each does, element by element, the very operations of the numpy code it replaces, in the
# same order (so the same bits), in one pass over memory instead of one per operation.


cdef extern from *:
    """
    /* total = (grads[0] widened, where first, else total) + grads[1] + ... + grads[count-1],
       element by element in that order, as one float64 `+=` of each widened float32 gradient
       after the other gives, but in one pass over memory: each chunk's running sums stay in
       cache while every gradient is added to them. No pointer is `restrict`: a caller may
       pass arrays that overlap, and only `acc`, whose address never escapes, needs none. */
    #define PONG_MP_ADD_CHUNK 512

    /* Where `zeroed[k]` flags the W1 row (of `unit` elements; `units` rows come first) that
       an element lies in, gradient k holds +0.0 there and is not read: its addition is
       acc + 0.0, which keeps the bits of the sum (it turns -0.0 into +0.0, and nothing
       else), and two of them in a row are one, so a run of flagged gradients costs one pass
       over the row's sums. The chunk is taken row piece by row piece for that. */
    static void pong_mp_add_float32(
        double *total, const float *const *grads, const unsigned char *const *zeroed,
        Py_ssize_t count, int first, Py_ssize_t n, Py_ssize_t start, Py_ssize_t unit,
        Py_ssize_t units)
    {
        double acc[PONG_MP_ADD_CHUNK];
        for (Py_ssize_t c = 0; c < n; c += PONG_MP_ADD_CHUNK) {
            Py_ssize_t m = n - c < PONG_MP_ADD_CHUNK ? n - c : PONG_MP_ADD_CHUNK;
            for (Py_ssize_t lo = 0, hi; lo < m; lo = hi) {
                Py_ssize_t e = start + c + lo, row = -1, k = 0;
                hi = m;
                if (unit > 0 && e < unit * units) {
                    row = e / unit;
                    if ((row + 1) * unit - (start + c) < hi)
                        hi = (row + 1) * unit - (start + c);
                }
                int zero_last = 0;  /* whether the last operation was acc + 0.0 */
                if (first) {
                    const float *g = grads[0] + c;
                    if (row >= 0 && zeroed[0] != NULL && zeroed[0][row]) {
                        for (Py_ssize_t i = lo; i < hi; i++) acc[i] = 0.0;
                        zero_last = 1;
                    } else {
                        for (Py_ssize_t i = lo; i < hi; i++) acc[i] = (double)g[i];
                    }
                    k = 1;
                } else {
                    for (Py_ssize_t i = lo; i < hi; i++) acc[i] = total[c + i];
                }
                for (; k < count; k++) {
                    const float *g = grads[k] + c;
                    if (row >= 0 && zeroed[k] != NULL && zeroed[k][row]) {
                        if (!zero_last)
                            for (Py_ssize_t i = lo; i < hi; i++) acc[i] = acc[i] + 0.0;
                        zero_last = 1;
                    } else {
                        for (Py_ssize_t i = lo; i < hi; i++) acc[i] = acc[i] + (double)g[i];
                        zero_last = 0;
                    }
                }
                for (Py_ssize_t i = lo; i < hi; i++) total[c + i] = acc[i];
            }
        }
    }
    """
    void pong_mp_add_float32(double* total, const float** grads, const unsigned char** zeroed,
                             Py_ssize_t count, int first, Py_ssize_t n, Py_ssize_t start,
                             Py_ssize_t unit, Py_ssize_t units) nogil


def add_float32(
    double[::1] total,
    grads,
    bint first=False,
    zeroed=None,
    Py_ssize_t start=0,
    Py_ssize_t hidden=0,
) -> None:
    """total += each float32 gradient of `grads` in turn (total = the first, widened, where
    `first`), as numpy's `+=` adds them (each float32 widened exactly, then one float64
    addition), in one pass over memory: the batch sum's step (`batch_sum.py`).

    `zeroed`, where given, has for each gradient None or its flags of W1 rows known to hold
    +0.0 (`ppo_accumulate`'s), W1 being the first rows x `hidden` elements of the flat
    parameters, and `total` and the gradients a range of them that begins at element
    `start`: rows so flagged are not read, and the bits are the same."""
    cdef Py_ssize_t n = total.shape[0], count = len(grads), k, units = 0
    cdef const float[::1] grad
    cdef const unsigned char[::1] flags
    if count == 0:
        raise ValueError("add_float32: no gradient to add")
    if zeroed is not None and (len(zeroed) != count or hidden <= 0 or start < 0):
        raise ValueError("add_float32: zeroed needs a flag array (or None) for each gradient "
                         "and the rows' length")
    # Room for both pointer arrays, zeroed (no flags), freed with the array.
    room = np.zeros(2 * count, np.intp)
    cdef Py_ssize_t[::1] room_view = room
    cdef const float** pointers = <const float**>&room_view[0]
    cdef const unsigned char** flag_pointers = <const unsigned char**>&room_view[count]
    views = []  # each buffer stays held while its pointer is read
    for k in range(count):
        grad = grads[k]
        if grad.shape[0] != n:
            raise ValueError("add_float32: arrays of mismatched sizes")
        views.append(grad)
        pointers[k] = &grad[0] if n else NULL
        if zeroed is not None and zeroed[k] is not None:
            flags = zeroed[k]
            if units and flags.shape[0] != units:
                raise ValueError("add_float32: flags of mismatched sizes")
            units = flags.shape[0]
            views.append(flags)
            flag_pointers[k] = &flags[0] if units else NULL
    if n:
        with nogil:  # a round's sum runs on several threads, each on its own blocks
            pong_mp_add_float32(&total[0], pointers, flag_pointers, count, first, n, start,
                                hidden, units)


# -- the actor-critic's step, in ranges that threads share (optim.MeanStep) ---------------------

cdef extern from *:
    """
    /* Built once per instruction set and picked when the module loads, where the compiler
       can (GCC on x86-64 Linux): wider vectors divide and take roots faster, and since both
       are correctly rounded and nothing is fused (-ffp-contract=off), every version gives
       the same bits. */
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    #define PONG_MP_WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
    #else
    #define PONG_MP_WIDE
    #endif

    /* The sum of (total / divisor)^2 over each block first..last-1 of `block` elements
       (the last one cut at n), into partials: eight lanes, lane j taking the elements
       j mod 8 of the block, added pairwise at the end. A fixed order that does not depend
       on how the blocks are shared out. */
    PONG_MP_WIDE static void pong_mp_mean_squares(
        const double *restrict total, double divisor, double *restrict partials,
        Py_ssize_t first, Py_ssize_t last, Py_ssize_t block, Py_ssize_t n)
    {
        for (Py_ssize_t b = first; b < last; b++) {
            Py_ssize_t i = b * block, stop = i + block < n ? i + block : n;
            double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (; i + 8 <= stop; i += 8) {
                for (int j = 0; j < 8; j++) {
                    double g = total[i + j] / divisor;
                    lane[j] += g * g;
                }
            }
            for (int j = 0; i < stop; i++, j++) {
                double g = total[i] / divisor;
                lane[j] += g * g;
            }
            partials[b] = ((lane[0] + lane[1]) + (lane[2] + lane[3]))
                + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        }
    }

    /* Adam's step in place over [start, stop) (optim.py writes the formula), on the
       gradient (total / divisor) * scale, which numpy's `grad = total / divisor; grad *= scale`
       gives (the product only where scale is not 1); the new weights also written as
       float32. Returns whether one is not finite. Each hidden unit's weights take that
       unit's bias corrections, correction1[u] and correction2[u]: W1 (transposed, `hidden`
       a row) up to w1_end, where element i is unit i mod hidden's, then W2 up to w2_end,
       then the value head's weights up to head_end (w2_end where there is none); the
       elements after (the head's bias, the filters; all where hidden is 0) take the run's,
       the corrections' last entries. */
    #define PONG_MP_ADAM_ONE(CORRECTION1, CORRECTION2)                                     \
        {                                                                                   \
            double g = total[i] / divisor;                                                  \
            if (scaled)                                                                     \
                g = g * scale;                                                              \
            double m = momentum[i] * beta1 + keep1 * g;                                     \
            double v = cache[i] * beta2 + keep2 * (g * g);                                  \
            double p = ((m / (CORRECTION1)) / (sqrt(v / (CORRECTION2)) + eps)) * lr         \
                + params[i];                                                                \
            momentum[i] = m;                                                                \
            cache[i] = v;                                                                   \
            params[i] = p;                                                                  \
            weights[i] = (float)p;                                                          \
            bad |= !(p - p == 0.0);                                                         \
        }

    PONG_MP_WIDE static int pong_mp_adam_range(
        double *restrict params, double *restrict momentum, double *restrict cache,
        const double *restrict total, double divisor, double scale, double lr, double beta1,
        double beta2, double eps, const double *restrict correction1,
        const double *restrict correction2, Py_ssize_t hidden, Py_ssize_t w1_end,
        Py_ssize_t w2_end, Py_ssize_t head_end, float *restrict weights, Py_ssize_t start,
        Py_ssize_t stop)
    {
        double keep1 = 1.0 - beta1, keep2 = 1.0 - beta2;
        int bad = 0, scaled = scale != 1.0;
        Py_ssize_t i = start;
        while (i < stop) {
            /* the run of elements from i whose units follow one another (a row of W1, W2,
               the head's weights), or past them those of no unit: unit = i + offset */
            Py_ssize_t offset, end;
            if (i < w1_end) {
                Py_ssize_t unit = i % hidden;
                offset = unit - i;
                end = i - unit + hidden;
            } else if (i < w2_end) {
                offset = -w1_end, end = w2_end;
            } else if (i < head_end) {
                offset = -w2_end, end = head_end;
            } else {
                double run1 = correction1[hidden], run2 = correction2[hidden];
                for (; i < stop; i++)
                    PONG_MP_ADAM_ONE(run1, run2)
                break;
            }
            if (end > stop)
                end = stop;
            for (; i < end; i++)
                PONG_MP_ADAM_ONE(correction1[i + offset], correction2[i + offset])
        }
        return bad;
    }

    /* RMSProp's step in place over [start, stop), on the same gradient, as above. */
    PONG_MP_WIDE static int pong_mp_rmsprop_range(
        double *restrict params, double *restrict cache, const double *restrict total,
        double divisor, double scale, double lr, double decay, double eps,
        float *restrict weights, Py_ssize_t start, Py_ssize_t stop)
    {
        double keep = 1.0 - decay;
        int bad = 0, scaled = scale != 1.0;
        for (Py_ssize_t i = start; i < stop; i++) {
            double g = total[i] / divisor;
            if (scaled)
                g = g * scale;
            double c = cache[i] * decay + (g * g) * keep;
            double p = params[i] + (g / (sqrt(c) + eps)) * lr;
            cache[i] = c;
            params[i] = p;
            weights[i] = (float)p;
            bad |= !(p - p == 0.0);
        }
        return bad;
    }
    """
    void pong_mp_mean_squares(const double* total, double divisor, double* partials,
                              Py_ssize_t first, Py_ssize_t last, Py_ssize_t block,
                              Py_ssize_t n) nogil
    int pong_mp_adam_range(double* params, double* momentum, double* cache,
                           const double* total, double divisor, double scale, double lr,
                           double beta1, double beta2, double eps, const double* correction1,
                           const double* correction2, Py_ssize_t hidden, Py_ssize_t w1_end,
                           Py_ssize_t w2_end, Py_ssize_t head_end, float* weights,
                           Py_ssize_t start, Py_ssize_t stop) nogil
    int pong_mp_rmsprop_range(double* params, double* cache, const double* total,
                              double divisor, double scale, double lr, double decay,
                              double eps, float* weights, Py_ssize_t start,
                              Py_ssize_t stop) nogil


def mean_squares(
    const double[::1] total,
    double divisor,
    double[::1] partials,
    Py_ssize_t first,
    Py_ssize_t last,
    Py_ssize_t block,
) -> None:
    """Each block first..last-1 (of `block` elements)'s sum of (total / divisor)^2, in a fixed
    order of its own, into partials[block], with the GIL released (threads share blocks)."""
    cdef Py_ssize_t n = total.shape[0]
    if block < 1 or partials.shape[0] * block < n or not 0 <= first <= last <= partials.shape[0]:
        raise ValueError("mean_squares: blocks that do not fit the arrays")
    if first == last:
        return
    with nogil:
        pong_mp_mean_squares(&total[0], divisor, &partials[0], first, last, block, n)


def _check_range(name, arrays, Py_ssize_t start, Py_ssize_t stop) -> None:
    # The in-place step's arrays: one length, the range inside it, no two sharing memory
    # (the C loops mark them restrict).
    n = len(arrays[0])
    if any(len(a) != n for a in arrays) or not 0 <= start <= stop <= n:
        raise ValueError(f"{name}: arrays of mismatched sizes")
    if any(np.may_share_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:]):
        raise ValueError(f"{name}: arrays that overlap")


def adam_range(
    double[::1] params,
    double[::1] momentum,
    double[::1] cache,
    const double[::1] total,
    double divisor,
    double scale,
    double lr,
    double beta1,
    double beta2,
    double eps,
    const double[::1] correction1,
    const double[::1] correction2,
    Py_ssize_t rows,
    bint head,
    float[::1] weights,
    Py_ssize_t start,
    Py_ssize_t stop,
) -> bool:
    """Adam's step in place over elements start..stop-1, on the gradient (total / divisor) *
    scale, the new weights also written as float32 into `weights`, with the GIL released;
    whether a new weight is not finite. correction1 and correction2 hold each hidden unit's
    bias corrections, then the run's, which the elements of no unit take (the value head's
    bias, the filters; all, where they hold the run's alone). The parameters are laid out as
    `policy.split` reads them: W1 transposed (`rows` of a weight a unit), W2, then where
    `head` the value head."""
    cdef int bad
    cdef Py_ssize_t hidden = correction1.shape[0] - 1
    _check_range("adam_range", (params, momentum, cache, total, weights), start, stop)
    if hidden < 0 or correction2.shape[0] != hidden + 1 or rows < 0:
        raise ValueError("adam_range: corrections of mismatched sizes")
    cdef Py_ssize_t w1_end = rows * hidden, w2_end = w1_end + hidden
    cdef Py_ssize_t head_end = w2_end + (hidden if head else 0)
    if head_end > params.shape[0]:
        raise ValueError("adam_range: fewer parameters than the units hold")
    if start == stop:
        return False
    with nogil:
        bad = pong_mp_adam_range(&params[0], &momentum[0], &cache[0], &total[0], divisor,
                                 scale, lr, beta1, beta2, eps, &correction1[0],
                                 &correction2[0], hidden, w1_end, w2_end, head_end,
                                 &weights[0], start, stop)
    return bad != 0


def rmsprop_range(
    double[::1] params,
    double[::1] cache,
    const double[::1] total,
    double divisor,
    double scale,
    double lr,
    double decay,
    double eps,
    float[::1] weights,
    Py_ssize_t start,
    Py_ssize_t stop,
) -> bool:
    """RMSProp's step in place over elements start..stop-1, as `adam_range`."""
    cdef int bad
    _check_range("rmsprop_range", (params, cache, total, weights), start, stop)
    if start == stop:
        return False
    with nogil:
        bad = pong_mp_rmsprop_range(&params[0], &cache[0], &total[0], divisor, scale, lr,
                                    decay, eps, &weights[0], start, stop)
    return bad != 0
