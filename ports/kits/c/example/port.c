/* A walkthrough port in C: softmax, scaled_dot_product_attention and multi_head_attention at
 * float64, row-major and 0-based (the reference's own layout: ports/CONTRACT.md).
 *
 *     cc -std=c99 -O2 -I.. -o port port.c -lm
 *     attention-ports verify --port c=port.toml      (port.toml builds it, then runs ./port)
 *
 * Each operation reads its arguments by name (ap_array, ap_option_*), allocates its outputs
 * (ap_output) and fills them; ap_error() reports a bad input as that case's error. */
#define _POSIX_C_SOURCE 200809L
#include "attention_port.h"

/* y = softmax(x) along the last axis; a row that is all -inf comes back NaN (0/0), as the
 * reference's does (attention handles such rows itself). */
static void softmax_rows(const double *x, double *y, int64_t rows, int64_t n) {
    int64_t i, j;
    for (i = 0; i < rows; i++) {
        const double *xi = x + i * n;
        double *yi = y + i * n;
        double peak = -INFINITY, sum = 0.0;
        for (j = 0; j < n; j++) peak = xi[j] > peak ? xi[j] : peak;
        for (j = 0; j < n; j++) sum += (yi[j] = exp(xi[j] - peak));
        for (j = 0; j < n; j++) yi[j] /= sum;
    }
}

static int softmax(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", AP_F64_ARRAY, -1);
    const double *xd;
    int64_t k, n;
    if (!x) return AP_ERROR;
    if (x->ndim < 1) return ap_error(r, "softmax: x must have at least one dimension");
    xd = (const double *)x->data;
    for (k = 0; k < x->size; k++)
        if (isnan(xd[k]) || xd[k] == INFINITY) return ap_error(r, "softmax: x contains NaN or +Inf at flat index %lld", (long long)k);
    n = x->dims[x->ndim - 1];
    softmax_rows(xd, (double *)ap_output(r, "y", AP_F64_ARRAY, x->ndim, x->dims), n ? x->size / n : 0, n);
    return AP_OK;
}

/* One head: q (nq x d, stride sq), k and v (nk x d / dv, strides sk, sv), mask (nq x nk) or NULL;
 * out (nq x dv, stride so) and w (nq x nk). A query whose every score is -inf gets zero weights and
 * a zero output (masked_query = "zeros"). */
static void attend(const double *q, int64_t sq, const double *k, int64_t sk, const double *v, int64_t sv,
                   const double *mask, int64_t nq, int64_t nk, int64_t d, int64_t dv, double scale,
                   double *out, int64_t so, double *w) {
    int64_t i, j, t;
    for (i = 0; i < nq; i++) {
        double *wi = w + i * nk;
        int dead = 1;
        for (j = 0; j < nk; j++) {
            double s = 0.0;
            for (t = 0; t < d; t++) s += q[i * sq + t] * k[j * sk + t];
            s *= scale;
            if (mask) s += mask[i * nk + j];
            wi[j] = s;
            if (s != -INFINITY) dead = 0;
        }
        if (dead) {
            for (j = 0; j < nk; j++) wi[j] = 0.0;
        } else {
            softmax_rows(wi, wi, 1, nk);
        }
        for (t = 0; t < dv; t++) {
            double s = 0.0;
            for (j = 0; j < nk; j++) s += wi[j] * v[j * sv + t];
            out[i * so + t] = s;
        }
    }
}

static int check_mask(ap_call *c, ap_reply *r, const ap_value *mask, int64_t nq, int64_t nk) {
    if (mask && (mask->ndim != 2 || mask->dims[0] != nq || mask->dims[1] != nk))
        return ap_error(r, "%s: mask must be %lld x %lld (query x key)", c->op, (long long)nq, (long long)nk);
    return AP_OK;
}

static int sdpa(ap_call *c, ap_reply *r) {
    const ap_value *q = ap_array(c, r, "q", AP_F64_ARRAY, 2), *k, *v, *mask;
    int64_t dims[2];
    double scale;
    int bad;
    if (!q || !(k = ap_array(c, r, "k", AP_F64_ARRAY, 2)) || !(v = ap_array(c, r, "v", AP_F64_ARRAY, 2))) return AP_ERROR;
    mask = ap_optional_array(c, r, "mask", AP_F64_ARRAY, 2, &bad);
    if (bad) return AP_ERROR;
    if (q->dims[1] != k->dims[1] || k->dims[0] != v->dims[0])
        return ap_error(r, "scaled_dot_product_attention: q (%lld x %lld), k (%lld x %lld), v (%lld x %lld) do not fit",
                        (long long)q->dims[0], (long long)q->dims[1], (long long)k->dims[0], (long long)k->dims[1],
                        (long long)v->dims[0], (long long)v->dims[1]);
    if (check_mask(c, r, mask, q->dims[0], k->dims[0])) return AP_ERROR;
    if (!ap_option_f64(c, "scale", &scale)) scale = 1.0 / sqrt((double)q->dims[1]);
    dims[0] = q->dims[0];
    dims[1] = v->dims[1];
    {
        double *out = (double *)ap_output(r, "output", AP_F64_ARRAY, 2, dims);
        double *w;
        dims[1] = k->dims[0];
        w = (double *)ap_output(r, "weights", AP_F64_ARRAY, 2, dims);
        attend((const double *)q->data, q->dims[1], (const double *)k->data, k->dims[1], (const double *)v->data,
               v->dims[1], mask ? (const double *)mask->data : NULL, q->dims[0], k->dims[0], q->dims[1], v->dims[1],
               scale, out, v->dims[1], w);
    }
    return AP_OK;
}

/* y = x w (+ b): x (n x din), w (din x dout), b (dout) or NULL. */
static void project(const double *x, const double *w, const double *b, int64_t n, int64_t din, int64_t dout, double *y) {
    int64_t i, j, t;
    for (i = 0; i < n; i++)
        for (j = 0; j < dout; j++) {
            double s = 0.0;
            for (t = 0; t < din; t++) s += x[i * din + t] * w[t * dout + j];
            y[i * dout + j] = b ? s + b[j] : s;
        }
}

static int mha(ap_call *c, ap_reply *r) {
    static const char *weights[4] = {"w_q", "w_k", "w_v", "w_o"}, *biases[4] = {"b_q", "b_k", "b_v", "b_o"};
    const ap_value *x[3], *w[4], *b[4], *mask;
    int64_t nq, nk, dm, dh, h, heads, i, dims[3];
    double *proj[3], *concat, *out, *wts;
    int bad;
    x[0] = ap_array(c, r, "query", AP_F64_ARRAY, 2);
    x[1] = x[0] ? ap_array(c, r, "key", AP_F64_ARRAY, 2) : NULL;
    x[2] = x[1] ? ap_array(c, r, "value", AP_F64_ARRAY, 2) : NULL;
    if (!x[2]) return AP_ERROR;
    if (!ap_option_i64(c, "num_heads", &heads)) return ap_error(r, "multi_head_attention: num_heads is absent");
    nq = x[0]->dims[0];
    nk = x[1]->dims[0];
    dm = x[0]->dims[1];
    if (x[1]->dims[1] != dm || x[2]->dims[1] != dm || x[2]->dims[0] != nk)
        return ap_error(r, "multi_head_attention: query, key and value need one d_model, key and value one n_k");
    if (heads < 1 || dm % heads) return ap_error(r, "multi_head_attention: num_heads=%lld must divide d_model=%lld", (long long)heads, (long long)dm);
    for (i = 0; i < 4; i++) {
        if (!(w[i] = ap_array(c, r, weights[i], AP_F64_ARRAY, 2))) return AP_ERROR;
        if (w[i]->dims[0] != dm || w[i]->dims[1] != dm)
            return ap_error(r, "multi_head_attention: %s must be %lld x %lld", weights[i], (long long)dm, (long long)dm);
        b[i] = ap_optional_array(c, r, biases[i], AP_F64_ARRAY, 1, &bad);
        if (bad) return AP_ERROR;
        if (b[i] && b[i]->dims[0] != dm) return ap_error(r, "multi_head_attention: %s must have length %lld", biases[i], (long long)dm);
    }
    mask = ap_optional_array(c, r, "mask", AP_F64_ARRAY, 2, &bad);
    if (bad || check_mask(c, r, mask, nq, nk)) return AP_ERROR;
    for (i = 0; i < 3; i++) {
        int64_t n = x[i]->dims[0];
        proj[i] = (double *)ap_scratch(sizeof(double) * (size_t)(n * dm));  /* freed after the reply */
        project((const double *)x[i]->data, (const double *)w[i]->data, b[i] ? (const double *)b[i]->data : NULL, n, dm, dm, proj[i]);
    }
    concat = (double *)ap_scratch(sizeof(double) * (size_t)(nq * dm));
    dims[0] = heads;
    dims[1] = nq;
    dims[2] = nk;
    wts = (double *)ap_output(r, "weights", AP_F64_ARRAY, 3, dims);
    dh = dm / heads;
    for (h = 0; h < heads; h++)
        attend(proj[0] + h * dh, dm, proj[1] + h * dh, dm, proj[2] + h * dh, dm, mask ? (const double *)mask->data : NULL,
               nq, nk, dh, dh, 1.0 / sqrt((double)dh), concat + h * dh, dm, wts + h * nq * nk);
    dims[0] = nq;
    dims[1] = dm;
    out = (double *)ap_output(r, "output", AP_F64_ARRAY, 2, dims);
    project(concat, (const double *)w[3]->data, b[3] ? (const double *)b[3]->data : NULL, nq, dm, dm, out);
    return AP_OK;
}

static const ap_op OPS[] = {
    {"softmax", softmax},
    {"scaled_dot_product_attention", sdpa},
    {"multi_head_attention", mha},
    {0, 0},
};

int main(void) {
    ap_port port = {"C kit walkthrough port 1.0", OPS, "float64", "zeros"};
    return ap_serve(&port);
}
