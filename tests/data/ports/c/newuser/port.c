/* A C port written from docs/protocol.md and attention_port.h alone: issue 27's new-user trial
 * (docs/protocol.md, "A port written from these docs alone"). Built by port.toml with the docs'
 * build line (-std=c99, the header included first); optional arrays are read with the scalar tag
 * AP_F64, as the header's usage example reads a required one. tests/runtimes/command/test_newuser_c.py
 * runs it on every case of its five operations. */
#include "attention_port.h"

/* softmax of one row of n, in place into y; an all -Inf row is NaN (0/0) */
static void softmax_row(const double *x, double *y, int64_t n) {
    double m = -INFINITY, s = 0.0;
    int64_t j;
    for (j = 0; j < n; j++) if (x[j] > m) m = x[j];
    for (j = 0; j < n; j++) { y[j] = exp(x[j] - m); s += y[j]; }
    for (j = 0; j < n; j++) y[j] /= s;
}

static int softmax(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", AP_F64, 2);
    double *y;
    int64_t i;
    if (!x) return AP_ERROR;
    y = ap_output(r, "y", AP_F64, x->ndim, x->dims);
    for (i = 0; i < x->dims[0]; i++)
        softmax_row((const double *)x->data + i * x->dims[1], y + i * x->dims[1], x->dims[1]);
    return AP_OK;
}

/* one head: q n_q x d_k (stride sq), k n_k x d_k (stride sk), v n_k x d_v (stride sv);
   out n_q x d_v (stride so), w n_q x n_k; mask n_q x n_k or NULL */
static void attend(const double *q, int64_t sq, const double *k, int64_t sk, const double *v, int64_t sv,
                   const double *mask, double scale, int64_t n_q, int64_t n_k, int64_t d_k, int64_t d_v,
                   double *out, int64_t so, double *w) {
    int64_t i, j, t;
    for (i = 0; i < n_q; i++) {
        double *wi = w + i * n_k, m = -INFINITY, s = 0.0;
        for (j = 0; j < n_k; j++) {
            double acc = 0.0;
            for (t = 0; t < d_k; t++) acc += q[i * sq + t] * k[j * sk + t];
            wi[j] = scale * acc + (mask ? mask[i * n_k + j] : 0.0);
            if (wi[j] > m) m = wi[j];
        }
        if (m == -INFINITY) { /* every key removed: zero weights, zero output ("zeros") */
            for (j = 0; j < n_k; j++) wi[j] = 0.0;
            for (t = 0; t < d_v; t++) out[i * so + t] = 0.0;
            continue;
        }
        for (j = 0; j < n_k; j++) { wi[j] = exp(wi[j] - m); s += wi[j]; }
        for (j = 0; j < n_k; j++) wi[j] /= s;
        for (t = 0; t < d_v; t++) {
            double acc = 0.0;
            for (j = 0; j < n_k; j++) acc += wi[j] * v[j * sv + t];
            out[i * so + t] = acc;
        }
    }
}

static int sdpa(ap_call *c, ap_reply *r) {
    const ap_value *q = ap_array(c, r, "q", AP_F64, 2), *k, *v, *mask;
    int bad;
    double scale, *out, *w;
    int64_t n_q, n_k, d_k, d_v, od[2], wd[2];
    if (!q) return AP_ERROR;
    if (!(k = ap_array(c, r, "k", AP_F64, 2))) return AP_ERROR;
    if (!(v = ap_array(c, r, "v", AP_F64, 2))) return AP_ERROR;
    mask = ap_optional_array(c, r, "mask", AP_F64, 2, &bad);
    if (bad) return AP_ERROR;
    n_q = q->dims[0]; d_k = q->dims[1]; n_k = k->dims[0]; d_v = v->dims[1];
    if (k->dims[1] != d_k || v->dims[0] != n_k) return ap_error(r, "sdpa: shapes do not agree");
    if (!ap_option_f64(c, "scale", &scale)) scale = 1.0 / sqrt((double)d_k);
    od[0] = n_q; od[1] = d_v; wd[0] = n_q; wd[1] = n_k;
    out = ap_output(r, "output", AP_F64, 2, od);
    w = ap_output(r, "weights", AP_F64, 2, wd);
    attend(q->data, d_k, k->data, d_k, v->data, d_v, mask ? mask->data : NULL, scale, n_q, n_k, d_k, d_v,
           out, d_v, w);
    return AP_OK;
}

/* y = x W + b: x n x din, W din x dout, b dout or NULL */
static void linear(const double *x, const double *W, const double *b, int64_t n, int64_t din, int64_t dout,
                   double *y) {
    int64_t i, j, t;
    for (i = 0; i < n; i++)
        for (j = 0; j < dout; j++) {
            double acc = b ? b[j] : 0.0;
            for (t = 0; t < din; t++) acc += x[i * din + t] * W[t * dout + j];
            y[i * dout + j] = acc;
        }
}

static int mha(ap_call *c, ap_reply *r) {
    const char *wn[4] = {"w_q", "w_k", "w_v", "w_o"}, *bn[4] = {"b_q", "b_k", "b_v", "b_o"};
    const ap_value *query, *key, *value, *W[4], *B[4], *mask;
    int bad, i;
    int64_t h, d, dh, n_q, n_k, head, od[2], wd[3];
    double *Q, *K, *V, *concat, *out, *w;
    if (!(query = ap_array(c, r, "query", AP_F64, 2))) return AP_ERROR;
    if (!(key = ap_array(c, r, "key", AP_F64, 2))) return AP_ERROR;
    if (!(value = ap_array(c, r, "value", AP_F64, 2))) return AP_ERROR;
    for (i = 0; i < 4; i++) {
        if (!(W[i] = ap_array(c, r, wn[i], AP_F64, 2))) return AP_ERROR;
        B[i] = ap_optional_array(c, r, bn[i], AP_F64, 1, &bad);
        if (bad) return AP_ERROR;
    }
    mask = ap_optional_array(c, r, "mask", AP_F64, 2, &bad);
    if (bad) return AP_ERROR;
    if (!ap_option_i64(c, "num_heads", &h) || h <= 0) return ap_error(r, "mha: num_heads missing");
    d = query->dims[1]; n_q = query->dims[0]; n_k = key->dims[0];
    if (d % h) return ap_error(r, "mha: d_model %lld not divisible by %lld heads", (long long)d, (long long)h);
    dh = d / h;
    Q = ap_scratch(sizeof(double) * n_q * d);
    K = ap_scratch(sizeof(double) * n_k * d);
    V = ap_scratch(sizeof(double) * n_k * d);
    concat = ap_scratch(sizeof(double) * n_q * d);
    linear(query->data, W[0]->data, B[0] ? B[0]->data : NULL, n_q, d, d, Q);
    linear(key->data, W[1]->data, B[1] ? B[1]->data : NULL, n_k, d, d, K);
    linear(value->data, W[2]->data, B[2] ? B[2]->data : NULL, n_k, d, d, V);
    od[0] = n_q; od[1] = d; wd[0] = h; wd[1] = n_q; wd[2] = n_k;
    out = ap_output(r, "output", AP_F64, 2, od);
    w = ap_output(r, "weights", AP_F64, 3, wd);
    for (head = 0; head < h; head++)
        attend(Q + head * dh, d, K + head * dh, d, V + head * dh, d, mask ? mask->data : NULL,
               1.0 / sqrt((double)dh), n_q, n_k, dh, dh, concat + head * dh, d, w + head * n_q * n_k);
    linear(concat, W[3]->data, B[3] ? B[3]->data : NULL, n_q, d, d, out);
    return AP_OK;
}

static int layer_norm(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", AP_F64, 2), *g, *b;
    int bad;
    double eps, *y;
    int64_t n, d, i, j;
    if (!x) return AP_ERROR;
    g = ap_optional_array(c, r, "weight", AP_F64, 1, &bad);
    if (bad) return AP_ERROR;
    b = ap_optional_array(c, r, "bias", AP_F64, 1, &bad);
    if (bad) return AP_ERROR;
    if (!ap_option_f64(c, "eps", &eps)) eps = 1e-5;
    n = x->dims[0]; d = x->dims[1];
    y = ap_output(r, "y", AP_F64, 2, x->dims);
    for (i = 0; i < n; i++) {
        const double *xi = (const double *)x->data + i * d;
        double mean = 0.0, var = 0.0, inv;
        for (j = 0; j < d; j++) mean += xi[j];
        mean /= (double)d;
        for (j = 0; j < d; j++) var += (xi[j] - mean) * (xi[j] - mean);
        var /= (double)d;
        inv = 1.0 / sqrt(var + eps);
        for (j = 0; j < d; j++) {
            double v = (xi[j] - mean) * inv;
            if (g) v *= ((const double *)g->data)[j];
            if (b) v += ((const double *)b->data)[j];
            y[i * d + j] = v;
        }
    }
    return AP_OK;
}

static int gelu(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", AP_F64, 2), *a = ap_find(c, "approximate");
    int tanh_form = 0;
    double *y;
    int64_t i;
    if (!x) return AP_ERROR;
    if (a && a->tag == AP_STR) tanh_form = strcmp(a->s, "tanh") == 0;
    y = ap_output(r, "y", AP_F64, x->ndim, x->dims);
    for (i = 0; i < x->size; i++) {
        double v = ((const double *)x->data)[i];
        y[i] = tanh_form ? 0.5 * v * (1.0 + tanh(0.7978845608028654 /* sqrt(2/pi) */ * (v + 0.044715 * v * v * v)))
                         : 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    }
    return AP_OK;
}

static const ap_op OPS[] = {{"softmax", softmax},
                            {"scaled_dot_product_attention", sdpa},
                            {"multi_head_attention", mha},
                            {"layer_norm", layer_norm},
                            {"gelu", gelu},
                            {0, 0}};

int main(void) {
    ap_port port = {"newuser C port 0.1", OPS, "float64", "zeros"};
    return ap_serve(&port);
}
