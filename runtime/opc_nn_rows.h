/* opc_nn_rows.h -- the bodies of opc's CPU row kernels, written once for an
 * accumulator type. NOT a normal header: opc_nn.h includes it twice, once per
 * precision family, after defining
 *   OPC_NN_ACC            the compute type (float for f32/f16/bf16, double for f64)
 *   OPC_NN_FN(name)       the family's name for a kernel (opc_nn_name_s / _d)
 *   OPC_NN_LD(p, i, dt)   element i of the buffer p of dtype dt, in OPC_NN_ACC
 *   OPC_NN_ST(p, i, dt, v)  store v rounded to dtype dt (nearest even)
 *   OPC_NN_EXP, OPC_NN_LOG, OPC_NN_SQRT   the family's math
 * and undefines them afterwards. No include guard on purpose.
 *
 * Layout: a tensor is viewed as [outer, n, inner] and normalized along n.
 * Each kernel is a function of one *unit* of work, u: with inner == 1 the
 * row u (contiguous; its reductions keep OPC_NN_LANES partial results, so
 * the loops vectorize without reassociation flags), else the tile u of up
 * to OPC_NN_TILE consecutive inner positions, whose loops all run along
 * inner. opc_nn.h's entry points run the units in parallel: the parallel
 * loop sits there, where the dtype is a literal, so that the loads and
 * stores of OpenMP's outlined body specialize and vectorize.
 */

#define ACC OPC_NN_ACC
#define LD OPC_NN_LD
#define ST OPC_NN_ST

/* The sum of a row's OPC_NN_LANES partials, pairwise (they are independent add chains: one
 * chain per vector lane would wait on the add latency). */
OPC_NN_INLINE ACC OPC_NN_FN(fold)(ACC *lane) {
    for (int w = OPC_NN_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) lane[k] += lane[k + w];
    return lane[0];
}

/* max over x[base + j], j < n (NaN propagates, as reduce_max) */
OPC_NN_INLINE ACC OPC_NN_FN(row_max)(const void *x, int64_t base, int64_t n, int dt) {
    ACC lane[OPC_NN_LANES];
    for (int k = 0; k < OPC_NN_LANES; k++) lane[k] = (ACC)-INFINITY;
    int64_t j = 0;
    for (; j + OPC_NN_LANES <= n; j += OPC_NN_LANES)
        OPC_NN_SIMD_LANES {
            const ACC v = LD(x, base + j + k, dt);
            lane[k] = OPC_NN_MAX(lane[k], v);
        }
    for (int w = OPC_NN_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) lane[k] = OPC_NN_MAX(lane[k], lane[k + w]);
    ACC m = lane[0];
    for (; j < n; j++) {
        const ACC v = LD(x, base + j, dt);
        m = OPC_NN_MAX(m, v);
    }
    return m;
}

/* sum of exp(x - m); each term also stored to y when `store` (exact dtypes only) */
OPC_NN_INLINE ACC OPC_NN_FN(row_expsum)(const void *x, void *y, int store, int64_t base, int64_t n, ACC m, int dt) {
    ACC lane[OPC_NN_LANES];
    for (int k = 0; k < OPC_NN_LANES; k++) lane[k] = 0;
    int64_t j = 0;
    if (store) {
        for (; j + OPC_NN_LANES <= n; j += OPC_NN_LANES)
            OPC_NN_SIMD_LANES {
                const ACC e = OPC_NN_EXP(LD(x, base + j + k, dt) - m);
                ST(y, base + j + k, dt, e);
                lane[k] += e;
            }
    } else {
        for (; j + OPC_NN_LANES <= n; j += OPC_NN_LANES)
            OPC_NN_SIMD_LANES lane[k] += OPC_NN_EXP(LD(x, base + j + k, dt) - m);
    }
    ACC s = OPC_NN_FN(fold)(lane);
    for (; j < n; j++) {
        const ACC e = OPC_NN_EXP(LD(x, base + j, dt) - m);
        if (store) ST(y, base + j, dt, e);
        s += e;
    }
    return s;
}

/* sum of a[base + j] * b[base + j], or of a alone when !with_b */
OPC_NN_INLINE ACC OPC_NN_FN(row_dot)(const void *a, const void *b, int with_b, int64_t base, int64_t n, int dt) {
    ACC lane[OPC_NN_LANES];
    for (int k = 0; k < OPC_NN_LANES; k++) lane[k] = 0;
    int64_t j = 0;
    if (with_b) {
        for (; j + OPC_NN_LANES <= n; j += OPC_NN_LANES)
            OPC_NN_SIMD_LANES lane[k] += LD(a, base + j + k, dt) * LD(b, base + j + k, dt);
    } else {
        for (; j + OPC_NN_LANES <= n; j += OPC_NN_LANES)
            OPC_NN_SIMD_LANES lane[k] += LD(a, base + j + k, dt);
    }
    ACC s = OPC_NN_FN(fold)(lane);
    for (; j < n; j++) s += with_b ? LD(a, base + j, dt) * LD(b, base + j, dt) : LD(a, base + j, dt);
    return s;
}

/* The tile u of [outer, n, inner]: its first element and width (inner positions). */
#define OPC_NN_TILE_OF(u, n, inner, base, w)                                                      \
    const int64_t opc_tiles_ = (inner + OPC_NN_TILE - 1) / OPC_NN_TILE;                           \
    const int64_t opc_i0_ = (u % opc_tiles_) * OPC_NN_TILE;                                       \
    const int64_t w = inner - opc_i0_ < OPC_NN_TILE ? inner - opc_i0_ : OPC_NN_TILE;              \
    const int64_t base = (u / opc_tiles_) * n * inner + opc_i0_

/* Of a tile (w inner positions from base): m[k] = max and s[k] = sum of exp(x - m) along n; each
 * term also stored to y when `store`. */
OPC_NN_INLINE void OPC_NN_FN(tile_expsum)(const void *x, void *y, int store, int64_t base, int64_t n,
                                          int64_t inner, int64_t w, ACC *m, ACC *s, int dt) {
    for (int64_t k = 0; k < w; k++) { m[k] = (ACC)-INFINITY; s[k] = 0; }
    for (int64_t j = 0; j < n; j++)
        for (int64_t k = 0; k < w; k++) {
            const ACC v = LD(x, base + j * inner + k, dt);
            m[k] = OPC_NN_MAX(m[k], v);
        }
    for (int64_t j = 0; j < n; j++)
        for (int64_t k = 0; k < w; k++) {
            const ACC e = OPC_NN_EXP(LD(x, base + j * inner + k, dt) - m[k]);
            if (store) ST(y, base + j * inner + k, dt, e);
            s[k] += e;
        }
}

/* ---- softmax / log_softmax ------------------------------------------------ */
/* y = exp(x - m) / s, or (x - m) - log(s), with m = max and s = sum(exp(x - m)) along n. */
OPC_NN_INLINE void OPC_NN_FN(softmax)(const void *x, void *y, int64_t u, int64_t n, int64_t inner, int dt,
                                      int log_form) {
    const int keep = OPC_NN_EXACT(dt) && !log_form; /* y holds exp(x - m) exactly until rescaled */
    if (inner == 1) {
        const int64_t base = u * n;
        const ACC m = OPC_NN_FN(row_max)(x, base, n, dt);
        const ACC s = OPC_NN_FN(row_expsum)(x, y, keep, base, n, m, dt);
        if (log_form) {
            const ACC ls = OPC_NN_LOG(s);
            for (int64_t j = 0; j < n; j++) ST(y, base + j, dt, (LD(x, base + j, dt) - m) - ls);
        } else if (keep) {
            const ACC r = (ACC)1 / s;
            for (int64_t j = 0; j < n; j++) ST(y, base + j, dt, LD(y, base + j, dt) * r);
        } else {
            const ACC r = (ACC)1 / s;
            for (int64_t j = 0; j < n; j++) ST(y, base + j, dt, OPC_NN_EXP(LD(x, base + j, dt) - m) * r);
        }
        return;
    }
    OPC_NN_TILE_OF(u, n, inner, base, w);
    ACC m[OPC_NN_TILE], s[OPC_NN_TILE];
    OPC_NN_FN(tile_expsum)(x, y, keep, base, n, inner, w, m, s, dt);
    for (int64_t k = 0; k < w; k++) s[k] = log_form ? OPC_NN_LOG(s[k]) : (ACC)1 / s[k];
    for (int64_t j = 0; j < n; j++)
        for (int64_t k = 0; k < w; k++) {
            const int64_t at = base + j * inner + k;
            ACC v;
            if (log_form) v = (LD(x, at, dt) - m[k]) - s[k];
            else if (keep) v = LD(y, at, dt) * s[k];
            else v = OPC_NN_EXP(LD(x, at, dt) - m[k]) * s[k];
            ST(y, at, dt, v);
        }
}

/* ---- softmax_grad / log_softmax_grad -------------------------------------- */
/* softmax: dx = out * (dout - sum(dout * out)); log_softmax: dx = dout - exp(out) * sum(dout). */
OPC_NN_INLINE void OPC_NN_FN(softmax_grad)(const void *out, const void *dout, void *dx, int64_t u, int64_t n,
                                           int64_t inner, int dt, int log_form) {
    if (inner == 1) {
        const int64_t base = u * n;
        const ACC c = OPC_NN_FN(row_dot)(dout, out, !log_form, base, n, dt);
        if (log_form)
            for (int64_t j = 0; j < n; j++)
                ST(dx, base + j, dt, LD(dout, base + j, dt) - OPC_NN_EXP(LD(out, base + j, dt)) * c);
        else
            for (int64_t j = 0; j < n; j++)
                ST(dx, base + j, dt, LD(out, base + j, dt) * (LD(dout, base + j, dt) - c));
        return;
    }
    OPC_NN_TILE_OF(u, n, inner, base, w);
    ACC c[OPC_NN_TILE];
    for (int64_t k = 0; k < w; k++) c[k] = 0;
    for (int64_t j = 0; j < n; j++)
        for (int64_t k = 0; k < w; k++) {
            const int64_t at = base + j * inner + k;
            c[k] += log_form ? LD(dout, at, dt) : LD(dout, at, dt) * LD(out, at, dt);
        }
    for (int64_t j = 0; j < n; j++)
        for (int64_t k = 0; k < w; k++) {
            const int64_t at = base + j * inner + k;
            const ACC y = LD(out, at, dt), d = LD(dout, at, dt);
            ST(dx, at, dt, log_form ? d - OPC_NN_EXP(y) * c[k] : y * (d - c[k]));
        }
}

/* ---- layer_norm ----------------------------------------------------------- */
/* Row r of `cols` contiguous elements: mean, var = mean((x - mean)^2), rstd = 1 / sqrt(var + eps),
 * y = (x - mean) * rstd * scale + bias; mean and rstd saved in the compute type. */
OPC_NN_INLINE void OPC_NN_FN(layer_norm)(const void *x, const void *scale, const void *bias, void *y, ACC *mean,
                                         ACC *rstd, int64_t r, int64_t cols, double eps, int dt) {
    const ACC inv = (ACC)1 / (ACC)cols;
    const int64_t base = r * cols;
    const ACC mu = OPC_NN_FN(row_dot)(x, x, 0, base, cols, dt) * inv;
    ACC lane[OPC_NN_LANES];
    for (int k = 0; k < OPC_NN_LANES; k++) lane[k] = 0;
    int64_t j = 0;
    for (; j + OPC_NN_LANES <= cols; j += OPC_NN_LANES)
        OPC_NN_SIMD_LANES {
            const ACC c = LD(x, base + j + k, dt) - mu;
            lane[k] += c * c;
        }
    ACC var = OPC_NN_FN(fold)(lane);
    for (; j < cols; j++) {
        const ACC c = LD(x, base + j, dt) - mu;
        var += c * c;
    }
    const ACC rs = (ACC)1 / OPC_NN_SQRT(var * inv + (ACC)eps);
    for (int64_t c = 0; c < cols; c++)
        ST(y, base + c, dt, (LD(x, base + c, dt) - mu) * rs * LD(scale, c, dt) + LD(bias, c, dt));
    mean[r] = mu;
    rstd[r] = rs;
}

/* ---- layer_norm_grad ------------------------------------------------------ */
/* Row r: xhat = (x - mean) * rstd, g = dy * scale, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
OPC_NN_INLINE void OPC_NN_FN(layer_norm_grad_dx)(const void *x, const void *scale, const ACC *mean,
                                                 const ACC *rstd, const void *dy, void *dx, int64_t r, int64_t cols,
                                                 int dt) {
    const ACC inv = (ACC)1 / (ACC)cols;
    const int64_t base = r * cols;
    const ACC mu = mean[r], rs = rstd[r];
    ACC sg[OPC_NN_LANES], sgx[OPC_NN_LANES];
    for (int k = 0; k < OPC_NN_LANES; k++) { sg[k] = 0; sgx[k] = 0; }
    int64_t j = 0;
    for (; j + OPC_NN_LANES <= cols; j += OPC_NN_LANES)
        OPC_NN_SIMD_LANES {
            const ACC g = LD(dy, base + j + k, dt) * LD(scale, j + k, dt);
            sg[k] += g;
            sgx[k] += g * ((LD(x, base + j + k, dt) - mu) * rs);
        }
    ACC a = 0, b = 0;
    a += OPC_NN_FN(fold)(sg);
    b += OPC_NN_FN(fold)(sgx);
    for (; j < cols; j++) {
        const ACC g = LD(dy, base + j, dt) * LD(scale, j, dt);
        a += g;
        b += g * ((LD(x, base + j, dt) - mu) * rs);
    }
    a *= inv;
    b *= inv;
    for (int64_t c = 0; c < cols; c++) {
        const ACC g = LD(dy, base + c, dt) * LD(scale, c, dt);
        const ACC xhat = (LD(x, base + c, dt) - mu) * rs;
        ST(dx, base + c, dt, rs * ((g - a) - xhat * b));
    }
}

/* Column tile t: dscale = sum over rows of dy * xhat, dbias = sum over rows of dy, in row order. */
OPC_NN_INLINE void OPC_NN_FN(layer_norm_grad_params)(const void *x, const ACC *mean, const ACC *rstd,
                                                     const void *dy, void *dscale, void *dbias, int64_t t,
                                                     int64_t rows, int64_t cols, int dt) {
    const int64_t c0 = t * OPC_NN_TILE;
    const int64_t w = cols - c0 < OPC_NN_TILE ? cols - c0 : OPC_NN_TILE;
    ACC ds[OPC_NN_TILE], db[OPC_NN_TILE];
    for (int64_t k = 0; k < w; k++) { ds[k] = 0; db[k] = 0; }
    for (int64_t r = 0; r < rows; r++) {
        const int64_t base = r * cols + c0;
        const ACC mu = mean[r], rs = rstd[r];
        for (int64_t k = 0; k < w; k++) {
            const ACC d = LD(dy, base + k, dt);
            ds[k] += d * ((LD(x, base + k, dt) - mu) * rs);
            db[k] += d;
        }
    }
    for (int64_t k = 0; k < w; k++) {
        ST(dscale, c0 + k, dt, ds[k]);
        ST(dbias, c0 + k, dt, db[k]);
    }
}

/* ---- softmax_cross_entropy ------------------------------------------------ */
/* softmax = exp(x - m) / s, loss = -((x[label] - m) - log s). A label outside [0, n) fails the
 * status record with `code` (the loss of that row is NaN, nothing is read out of bounds). */
OPC_NN_INLINE void OPC_NN_FN(softmax_cross_entropy)(const void *logits, const void *label, int label64, void *loss,
                                                    void *sm, int64_t *record, int64_t u, int64_t n, int64_t inner,
                                                    int64_t code, int dt) {
    const int keep = OPC_NN_EXACT(dt);
    if (inner == 1) {
        const int64_t base = u * n;
        const ACC m = OPC_NN_FN(row_max)(logits, base, n, dt);
        const ACC s = OPC_NN_FN(row_expsum)(logits, sm, keep, base, n, m, dt);
        const ACC r = (ACC)1 / s;
        if (keep)
            for (int64_t j = 0; j < n; j++) ST(sm, base + j, dt, LD(sm, base + j, dt) * r);
        else
            for (int64_t j = 0; j < n; j++) ST(sm, base + j, dt, OPC_NN_EXP(LD(logits, base + j, dt) - m) * r);
        const int64_t l = opc_nn_label(label, u, label64);
        if (l < 0 || l >= n) {
            opc_status_fail(record, code, l);
            ST(loss, u, dt, (ACC)NAN);
        } else {
            ST(loss, u, dt, -((LD(logits, base + l, dt) - m) - OPC_NN_LOG(s)));
        }
        return;
    }
    OPC_NN_TILE_OF(u, n, inner, base, w);
    const int64_t row0 = (base / (n * inner)) * inner + (base % (n * inner));
    ACC m[OPC_NN_TILE], s[OPC_NN_TILE];
    OPC_NN_FN(tile_expsum)(logits, sm, keep, base, n, inner, w, m, s, dt);
    for (int64_t k = 0; k < w; k++) {
        const int64_t l = opc_nn_label(label, row0 + k, label64);
        if (l < 0 || l >= n) {
            opc_status_fail(record, code, l);
            ST(loss, row0 + k, dt, (ACC)NAN);
        } else {
            ST(loss, row0 + k, dt, -((LD(logits, base + l * inner + k, dt) - m[k]) - OPC_NN_LOG(s[k])));
        }
        s[k] = (ACC)1 / s[k];
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t k = 0; k < w; k++) {
            const int64_t at = base + j * inner + k;
            ST(sm, at, dt, (keep ? LD(sm, at, dt) : OPC_NN_EXP(LD(logits, at, dt) - m[k])) * s[k]);
        }
}

/* ---- softmax_cross_entropy_grad ------------------------------------------- */
/* Outer index o: dlogits = (softmax - onehot(label)) * dloss; a label outside [0, n) fails like the forward. */
OPC_NN_INLINE void OPC_NN_FN(softmax_cross_entropy_grad)(const void *label, int label64, const void *sm,
                                                         const void *dloss, void *dx, int64_t *record, int64_t o,
                                                         int64_t n, int64_t inner, int64_t code, int dt) {
    for (int64_t i = 0; i < inner; i++) {
        const int64_t l = opc_nn_label(label, o * inner + i, label64);
        if (l < 0 || l >= n) opc_status_fail(record, code, l);
    }
    for (int64_t j = 0; j < n; j++) {
        const int64_t base = (o * n + j) * inner;
        for (int64_t i = 0; i < inner; i++) {
            const ACC hit = opc_nn_label(label, o * inner + i, label64) == j ? (ACC)1 : (ACC)0;
            ST(dx, base + i, dt, (LD(sm, base + i, dt) - hit) * LD(dloss, o * inner + i, dt));
        }
    }
}

#undef ACC
#undef LD
#undef ST
#undef OPC_NN_TILE_OF
