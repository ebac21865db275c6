/* gpt.c: GPT-2 in C, in the structure of Karpathy's llm.c (train_gpt2.c), on the C kit.
 *
 * Separate forward and backward kernels (encoder, layernorm, matmul, attention, gelu, residual,
 * softmax, crossentropy), the parameters and activations as named tensors pointing into one block
 * of memory each, a hand-written backward pass and an AdamW update over the whole parameter block:
 * the training loop of llm.c, one sequence (B = 1) per call. The operations of the contract
 * (ports/CONTRACT.md) are thin wrappers that read their arguments, run these kernels and write
 * their outputs. Row-major and 0-based, as the reference holds arrays.
 *
 *     cc -std=c99 -O1 -I../kits/c -o gpt gpt.c -lm                      (float64: port.toml)
 *     cc -std=c99 -O1 -I../kits/c -DAP_REAL=float -o gpt32 gpt.c -lm    (float32: port32.toml)
 *
 * `real` is the arithmetic of the whole port: double, or float with -DAP_REAL=float (the port then
 * declares precision "float32" and is sent float32 arrays). The transcendental functions (exp, log,
 * sqrt, erf, tanh) are the C library's double ones, rounded to `real`.
 */
#define _POSIX_C_SOURCE 200809L
#include "attention_port.h"

#ifndef AP_REAL
#define AP_REAL double
#endif
typedef AP_REAL real;
#define IS_DOUBLE (sizeof(real) == sizeof(double))
#define REAL_ARRAY ((char)(IS_DOUBLE ? AP_F64_ARRAY : AP_F32_ARRAY))
#define GELU_SCALING_FACTOR 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_CUBIC 0.044715
#define PI 3.14159265358979323846
#define ADAM_EPS 1e-8 /* torch's: gpt_train's option eps is the layer norms' */

static real *alloc_real(size_t n) { return (real *)ap_scratch(n * sizeof(real)); } /* zeroed; freed after the reply */

/* ----------------------------------------------------------------------------------------------
 * The kernels. N rows (tokens) of C features; every matrix row-major; a weight is the contract's
 * d_in x d_out (llm.c stores PyTorch's d_out x d_in: here out = inp weight + bias). A backward
 * kernel adds its gradients into d* (zeroed before the backward pass), as llm.c's do.
 * -------------------------------------------------------------------------------------------- */

/* out[t] = wte[tokens[t]] + wpe[t] */
static void encoder_forward(real *out, const int64_t *tokens, const real *wte, const real *wpe, int T, int C) {
    int t, c;
    for (t = 0; t < T; t++)
        for (c = 0; c < C; c++) out[t * C + c] = wte[tokens[t] * C + c] + wpe[t * C + c];
}

/* a token at several positions accumulates each position's gradient */
static void encoder_backward(real *dwte, real *dwpe, const real *dout, const int64_t *tokens, int T, int C) {
    int t, c;
    for (t = 0; t < T; t++)
        for (c = 0; c < C; c++) {
            dwte[tokens[t] * C + c] += dout[t * C + c];
            dwpe[t * C + c] += dout[t * C + c];
        }
}

/* (x - mean) * rstd * weight + bias per row, rstd = 1 / sqrt(var + eps), the biased variance in
 * two passes; weight and bias may be NULL (the layer_norm operation's optional gain and bias). */
static void layernorm_forward(real *out, real *mean, real *rstd, const real *inp, const real *weight,
                              const real *bias, int N, int C, real eps) {
    int i, c;
    for (i = 0; i < N; i++) {
        const real *x = inp + i * C;
        real *o = out + i * C;
        real m = 0, v = 0, s;
        for (c = 0; c < C; c++) m += x[c];
        m = m / C;
        for (c = 0; c < C; c++) {
            real xshift = x[c] - m;
            v += xshift * xshift;
        }
        v = v / C;
        s = (real)(1.0 / sqrt((double)(v + eps)));
        for (c = 0; c < C; c++) {
            real n = s * (x[c] - m);
            if (weight) n = n * weight[c];
            if (bias) n = n + bias[c];
            o[c] = n;
        }
        mean[i] = m;
        rstd[i] = s;
    }
}

static void layernorm_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                               const real *weight, const real *mean, const real *rstd, int N, int C) {
    int i, c;
    for (i = 0; i < N; i++) {
        const real *x = inp + i * C, *dy = dout + i * C;
        real m = mean[i], s = rstd[i], dnorm_mean = 0, dnorm_norm_mean = 0;
        for (c = 0; c < C; c++) {
            real norm = (x[c] - m) * s, dnorm = weight[c] * dy[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean = dnorm_mean / C;
        dnorm_norm_mean = dnorm_norm_mean / C;
        for (c = 0; c < C; c++) {
            real norm = (x[c] - m) * s, dnorm = weight[c] * dy[c];
            dbias[c] += dy[c];
            dweight[c] += norm * dy[c];
            dinp[i * C + c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

/* out (N x OC) = inp (N x C) weight (C x OC) + bias (OC, or NULL) */
static void matmul_forward(real *out, const real *inp, const real *weight, const real *bias, int N, int C, int OC) {
    int i, o, c;
    for (i = 0; i < N; i++)
        for (o = 0; o < OC; o++) {
            real val = 0;
            for (c = 0; c < C; c++) val += inp[i * C + c] * weight[c * OC + o];
            out[i * OC + o] = bias ? val + bias[o] : val;
        }
}

/* dinp += dout weight^T, dweight += inp^T dout, dbias += the column sums of dout (dbias may be NULL) */
static void matmul_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                            const real *weight, int N, int C, int OC) {
    int i, o, c;
    for (i = 0; i < N; i++)
        for (c = 0; c < C; c++) {
            real val = 0;
            for (o = 0; o < OC; o++) val += dout[i * OC + o] * weight[c * OC + o];
            dinp[i * C + c] += val;
        }
    for (c = 0; c < C; c++)
        for (o = 0; o < OC; o++) {
            real val = 0;
            for (i = 0; i < N; i++) val += inp[i * C + c] * dout[i * OC + o];
            dweight[c * OC + o] += val;
        }
    if (dbias)
        for (o = 0; o < OC; o++) {
            real val = 0;
            for (i = 0; i < N; i++) val += dout[i * OC + o];
            dbias[o] += val;
        }
}

/* NH heads of scaled dot-product attention. q (Tq rows), k and v (Tk rows) are row-major with row
 * strides ldq, ldk, ldv: head h reads columns [h hs, (h+1) hs) of q and k and [h hsv, (h+1) hsv) of
 * v, and writes those of out (row stride ldo). preatt and att are (NH, Tq, Tk): the scores
 * scale q.k + mask and their softmax. mask is additive (Tq x Tk) or NULL; causal removes the keys
 * after each query (GPT's attention, as llm.c's loop bounds do). A query that every key is removed
 * from gets zero weights and a zero output (the contract's masked_query "zeros"). */
static void attention_forward(real *out, real *preatt, real *att, const real *q, const real *k, const real *v,
                              int ldq, int ldk, int ldv, int ldo, const real *mask, int causal, int Tq, int Tk,
                              int NH, int hs, int hsv, real scale) {
    int h, t, t2, i;
    for (h = 0; h < NH; h++)
        for (t = 0; t < Tq; t++) {
            const real *qt = q + t * ldq + h * hs;
            real *pre = preatt + ((size_t)h * Tq + t) * Tk, *a = att + ((size_t)h * Tq + t) * Tk;
            real *o = out + t * ldo + h * hsv;
            real maxval = -INFINITY, sum = 0;
            for (t2 = 0; t2 < Tk; t2++) {
                const real *kt2 = k + t2 * ldk + h * hs;
                real val = 0;
                if (causal && t2 > t) {
                    pre[t2] = -INFINITY;
                    continue;
                }
                for (i = 0; i < hs; i++) val += qt[i] * kt2[i];
                val = val * scale;
                if (mask) val = val + mask[t * Tk + t2];
                pre[t2] = val;
                if (val > maxval) maxval = val;
            }
            if (maxval == -INFINITY) { /* every key removed */
                for (t2 = 0; t2 < Tk; t2++) a[t2] = 0;
                for (i = 0; i < hsv; i++) o[i] = 0;
                continue;
            }
            for (t2 = 0; t2 < Tk; t2++) {
                a[t2] = (real)exp((double)(pre[t2] - maxval));
                sum += a[t2];
            }
            for (t2 = 0; t2 < Tk; t2++) a[t2] = a[t2] / sum;
            for (i = 0; i < hsv; i++) {
                real val = 0;
                for (t2 = 0; t2 < Tk; t2++) val += a[t2] * v[t2 * ldv + h * hsv + i];
                o[i] = val;
            }
        }
}

/* The backward of attention_forward (same strides): dq, dk, dv += the gradients through the
 * softmax, datt and dpreatt (NH, Tq, Tk) are scratch. */
static void attention_backward(real *dq, real *dk, real *dv, real *dpreatt, real *datt, const real *dout,
                               const real *q, const real *k, const real *v, const real *att, int ldq, int ldk,
                               int ldv, int ldo, int Tq, int Tk, int NH, int hs, int hsv, real scale) {
    int h, t, t2, i;
    for (h = 0; h < NH; h++)
        for (t = 0; t < Tq; t++) {
            const real *a = att + ((size_t)h * Tq + t) * Tk, *dot = dout + t * ldo + h * hsv;
            real *da = datt + ((size_t)h * Tq + t) * Tk, *dpre = dpreatt + ((size_t)h * Tq + t) * Tk;
            real rowdot = 0;
            for (t2 = 0; t2 < Tk; t2++) { /* out = att v */
                const real *vt2 = v + t2 * ldv + h * hsv;
                real val = 0;
                for (i = 0; i < hsv; i++) {
                    val += dot[i] * vt2[i];
                    dv[t2 * ldv + h * hsv + i] += a[t2] * dot[i];
                }
                da[t2] = val;
                rowdot += val * a[t2];
            }
            for (t2 = 0; t2 < Tk; t2++) dpre[t2] = a[t2] * (da[t2] - rowdot) * scale; /* the softmax, the scale */
            for (i = 0; i < hs; i++) {                                               /* preatt = q.k */
                real val = 0;
                for (t2 = 0; t2 < Tk; t2++) {
                    val += dpre[t2] * k[t2 * ldk + h * hs + i];
                    dk[t2 * ldk + h * hs + i] += dpre[t2] * q[t * ldq + h * hs + i];
                }
                dq[t * ldq + h * hs + i] += val;
            }
        }
}

/* gelu, the erf form (tanh_form 0) or GPT-2's tanh approximation (1) */
static void gelu_forward(real *out, const real *inp, int N, int tanh_form) {
    int i;
    for (i = 0; i < N; i++) {
        double x = inp[i];
        if (tanh_form)
            out[i] = (real)(0.5 * x * (1.0 + tanh(GELU_SCALING_FACTOR * (x + GELU_CUBIC * x * x * x))));
        else
            out[i] = (real)(0.5 * x * (1.0 + erf(x / sqrt(2.0))));
    }
}

static void gelu_backward(real *dinp, const real *inp, const real *dout, int N, int tanh_form) {
    int i;
    for (i = 0; i < N; i++) {
        double x = inp[i], grad;
        if (tanh_form) {
            double th = tanh(GELU_SCALING_FACTOR * (x + GELU_CUBIC * x * x * x));
            grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_SCALING_FACTOR * (1.0 + 3.0 * GELU_CUBIC * x * x);
        } else {
            grad = 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * PI);
        }
        dinp[i] += (real)grad * dout[i];
    }
}

static void residual_forward(real *out, const real *inp1, const real *inp2, int N) {
    int i;
    for (i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

static void residual_backward(real *dinp1, real *dinp2, const real *dout, int N) {
    int i;
    for (i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

/* each row's softmax, the maximum subtracted first; a row that is all -inf comes back NaN (0/0) */
static void softmax_forward(real *probs, const real *logits, int N, int V) {
    int i, j;
    for (i = 0; i < N; i++) {
        const real *z = logits + (size_t)i * V;
        real *p = probs + (size_t)i * V;
        real maxval = -INFINITY, sum = 0;
        for (j = 0; j < V; j++)
            if (z[j] > maxval) maxval = z[j];
        for (j = 0; j < V; j++) {
            p[j] = (real)exp((double)(z[j] - maxval));
            sum += p[j];
        }
        for (j = 0; j < V; j++) p[j] = p[j] / sum;
    }
}

/* losses[i] = logsumexp(logits_i) - logits_i[targets_i] on the counted rows (0 elsewhere): from the
 * logits, not -log(probs), which is Inf where a target's probability underflows */
static void crossentropy_forward(real *losses, const real *logits, const int64_t *targets, const unsigned char *counted,
                                 int N, int V) {
    int i, j;
    for (i = 0; i < N; i++) {
        const real *z = logits + (size_t)i * V;
        real maxval = -INFINITY, sum = 0;
        losses[i] = 0;
        if (!counted[i]) continue;
        for (j = 0; j < V; j++)
            if (z[j] > maxval) maxval = z[j];
        for (j = 0; j < V; j++) sum += (real)exp((double)(z[j] - maxval));
        losses[i] = (maxval + (real)log((double)sum)) - z[targets[i]];
    }
}

/* the mean loss over `count` counted rows: dlogits_i += (probs_i - onehot(targets_i)) / count */
static void crossentropy_softmax_backward(real *dlogits, const real *probs, const int64_t *targets,
                                          const unsigned char *counted, int count, int N, int V) {
    int i, j;
    for (i = 0; i < N; i++) {
        if (!counted[i]) continue;
        for (j = 0; j < V; j++) {
            real indicator = j == targets[i] ? 1 : 0;
            dlogits[(size_t)i * V + j] += (probs[(size_t)i * V + j] - indicator) / (real)count;
        }
    }
}

/* one AdamW step (torch.optim.AdamW) of n parameters: bias-corrected moments, decoupled decay; the
 * scalars formed in double and rounded to real, as torch forms them */
static void adamw_update(real *params, const real *grads, real *m, real *v, size_t n, double lr, double beta1,
                         double beta2, double eps, double weight_decay, int64_t t) {
    real b1 = (real)beta1, b2 = (real)beta2, one_b1 = (real)(1.0 - beta1), one_b2 = (real)(1.0 - beta2);
    real corr1 = (real)(1.0 - pow(beta1, (double)t)), corr2 = (real)(1.0 - pow(beta2, (double)t));
    real decay = (real)(1.0 - lr * weight_decay), lr_ = (real)lr, eps_ = (real)eps;
    size_t i;
    for (i = 0; i < n; i++) {
        real g = grads[i];
        real mi = b1 * m[i] + one_b1 * g, vi = b2 * v[i] + one_b2 * (g * g);
        real m_hat = mi / corr1, v_hat = vi / corr2;
        m[i] = mi;
        v[i] = vi;
        params[i] = params[i] * decay - lr_ * m_hat / ((real)sqrt((double)v_hat) + eps_);
    }
}

/* ----------------------------------------------------------------------------------------------
 * The model: llm.c's parameter and activation tensors, each a pointer into one block.
 * -------------------------------------------------------------------------------------------- */

typedef struct {
    int V;    /* vocabulary: wte's rows, w_head's columns */
    int maxT; /* n_ctx: wpe's rows */
    int L;    /* blocks */
    int NH;   /* heads */
    int C;    /* d_model */
    int F;    /* d_ff: w_1's columns (llm.c: 4 C) */
} GPTConfig;

#define NUM_PARAMETER_TENSORS 17
typedef struct {
    real *wte;      /* (V, C) */
    real *wpe;      /* (maxT, C) */
    real *ln1w;     /* (L, C) */
    real *ln1b;     /* (L, C) */
    real *qkvw;     /* (L, C, 3C): the contract's w_q | w_k | w_v side by side */
    real *qkvb;     /* (L, 3C): b_q | b_k | b_v */
    real *attprojw; /* (L, C, C): w_o */
    real *attprojb; /* (L, C): b_o */
    real *ln2w;     /* (L, C) */
    real *ln2b;     /* (L, C) */
    real *fcw;      /* (L, C, F): w_1 */
    real *fcb;      /* (L, F): b_1 */
    real *fcprojw;  /* (L, F, C): w_2 */
    real *fcprojb;  /* (L, C): b_2 */
    real *lnfw;     /* (C) */
    real *lnfb;     /* (C) */
    real *whead;    /* (C, V): the untied LM head (llm.c ties it to wte) */
} ParameterTensors;

static void fill_in_parameter_sizes(size_t *sizes, GPTConfig cfg) {
    size_t V = cfg.V, maxT = cfg.maxT, L = cfg.L, C = cfg.C, F = cfg.F;
    sizes[0] = V * C;
    sizes[1] = maxT * C;
    sizes[2] = L * C;
    sizes[3] = L * C;
    sizes[4] = L * C * 3 * C;
    sizes[5] = L * 3 * C;
    sizes[6] = L * C * C;
    sizes[7] = L * C;
    sizes[8] = L * C;
    sizes[9] = L * C;
    sizes[10] = L * C * F;
    sizes[11] = L * F;
    sizes[12] = L * F * C;
    sizes[13] = L * C;
    sizes[14] = C;
    sizes[15] = C;
    sizes[16] = C * V;
}

static real *malloc_and_point_parameters(ParameterTensors *params, const size_t *sizes, size_t *total) {
    real **ptrs[NUM_PARAMETER_TENSORS];
    real *memory, *at;
    int k;
    ptrs[0] = &params->wte; ptrs[1] = &params->wpe; ptrs[2] = &params->ln1w; ptrs[3] = &params->ln1b;
    ptrs[4] = &params->qkvw; ptrs[5] = &params->qkvb; ptrs[6] = &params->attprojw; ptrs[7] = &params->attprojb;
    ptrs[8] = &params->ln2w; ptrs[9] = &params->ln2b; ptrs[10] = &params->fcw; ptrs[11] = &params->fcb;
    ptrs[12] = &params->fcprojw; ptrs[13] = &params->fcprojb; ptrs[14] = &params->lnfw; ptrs[15] = &params->lnfb;
    ptrs[16] = &params->whead;
    *total = 0;
    for (k = 0; k < NUM_PARAMETER_TENSORS; k++) *total += sizes[k];
    memory = at = alloc_real(*total);
    for (k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        *ptrs[k] = at;
        at += sizes[k];
    }
    return memory;
}

#define NUM_ACTIVATION_TENSORS 24
typedef struct {
    real *encoded;   /* (T, C) */
    real *ln1;       /* (L, T, C) */
    real *ln1_mean;  /* (L, T) */
    real *ln1_rstd;  /* (L, T) */
    real *qkv;       /* (L, T, 3C) */
    real *atty;      /* (L, T, C): the heads' outputs side by side */
    real *preatt;    /* (L, NH, T, T) */
    real *att;       /* (L, NH, T, T) */
    real *attproj;   /* (L, T, C) */
    real *residual2; /* (L, T, C) */
    real *ln2;       /* (L, T, C) */
    real *ln2_mean;  /* (L, T) */
    real *ln2_rstd;  /* (L, T) */
    real *fch;       /* (L, T, F) */
    real *fch_gelu;  /* (L, T, F) */
    real *fcproj;    /* (L, T, C) */
    real *residual3; /* (L, T, C): each block's output */
    real *lnf;       /* (T, C) */
    real *lnf_mean;  /* (T) */
    real *lnf_rstd;  /* (T) */
    real *logits;    /* (T, V) */
    real *probs;     /* (T, V) */
    real *losses;    /* (T) */
    real *datt;      /* (NH, T, T): attention_backward's scratch (gradients only) */
} ActivationTensors;

static void fill_in_activation_sizes(size_t *sizes, GPTConfig cfg, int T) {
    size_t V = cfg.V, L = cfg.L, NH = cfg.NH, C = cfg.C, F = cfg.F, t = (size_t)T;
    sizes[0] = t * C;
    sizes[1] = L * t * C;
    sizes[2] = L * t;
    sizes[3] = L * t;
    sizes[4] = L * t * 3 * C;
    sizes[5] = L * t * C;
    sizes[6] = L * NH * t * t;
    sizes[7] = L * NH * t * t;
    sizes[8] = L * t * C;
    sizes[9] = L * t * C;
    sizes[10] = L * t * C;
    sizes[11] = L * t;
    sizes[12] = L * t;
    sizes[13] = L * t * F;
    sizes[14] = L * t * F;
    sizes[15] = L * t * C;
    sizes[16] = L * t * C;
    sizes[17] = t * C;
    sizes[18] = t;
    sizes[19] = t;
    sizes[20] = t * V;
    sizes[21] = t * V;
    sizes[22] = t;
    sizes[23] = NH * t * t;
}

static real *malloc_and_point_activations(ActivationTensors *acts, const size_t *sizes, size_t *total) {
    real **ptrs[NUM_ACTIVATION_TENSORS];
    real *memory, *at;
    int k;
    ptrs[0] = &acts->encoded; ptrs[1] = &acts->ln1; ptrs[2] = &acts->ln1_mean; ptrs[3] = &acts->ln1_rstd;
    ptrs[4] = &acts->qkv; ptrs[5] = &acts->atty; ptrs[6] = &acts->preatt; ptrs[7] = &acts->att;
    ptrs[8] = &acts->attproj; ptrs[9] = &acts->residual2; ptrs[10] = &acts->ln2; ptrs[11] = &acts->ln2_mean;
    ptrs[12] = &acts->ln2_rstd; ptrs[13] = &acts->fch; ptrs[14] = &acts->fch_gelu; ptrs[15] = &acts->fcproj;
    ptrs[16] = &acts->residual3; ptrs[17] = &acts->lnf; ptrs[18] = &acts->lnf_mean; ptrs[19] = &acts->lnf_rstd;
    ptrs[20] = &acts->logits; ptrs[21] = &acts->probs; ptrs[22] = &acts->losses; ptrs[23] = &acts->datt;
    *total = 0;
    for (k = 0; k < NUM_ACTIVATION_TENSORS; k++) *total += sizes[k];
    memory = at = alloc_real(*total);
    for (k = 0; k < NUM_ACTIVATION_TENSORS; k++) {
        *ptrs[k] = at;
        at += sizes[k];
    }
    return memory;
}

typedef struct {
    GPTConfig config;
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    real *params_memory;
    size_t num_parameters;
    ParameterTensors grads;
    real *grads_memory;
    real *m_memory; /* AdamW's moments */
    real *v_memory;
    ActivationTensors acts;
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    real *acts_memory;
    size_t num_activations;
    ActivationTensors grads_acts;
    real *grads_acts_memory;
    int T;
    const int64_t *tokens;        /* (T) */
    const int64_t *targets;       /* (T) or NULL */
    const unsigned char *counted; /* (T): the positions the loss counts (targets not ignore_index) */
    int count;
    real mean_loss;
    real eps;      /* the layer norms' */
    int tanh_gelu; /* gelu's form */
} GPT;

static void gpt_build(GPT *model, GPTConfig cfg, int T) {
    size_t total;
    model->config = cfg;
    model->T = T;
    fill_in_parameter_sizes(model->param_sizes, cfg);
    model->params_memory = malloc_and_point_parameters(&model->params, model->param_sizes, &model->num_parameters);
    model->grads_memory = malloc_and_point_parameters(&model->grads, model->param_sizes, &total);
    model->m_memory = alloc_real(model->num_parameters);
    model->v_memory = alloc_real(model->num_parameters);
    fill_in_activation_sizes(model->act_sizes, cfg, T);
    model->acts_memory = malloc_and_point_activations(&model->acts, model->act_sizes, &model->num_activations);
    model->grads_acts_memory = malloc_and_point_activations(&model->grads_acts, model->act_sizes, &total);
}

/* block l on its input `residual` (T, C): its output is acts.residual3 of block l */
static void block_forward(GPT *model, int l, const real *residual) {
    GPTConfig cfg = model->config;
    int T = model->T, C = cfg.C, F = cfg.F, NH = cfg.NH, hs = C / NH;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    size_t TC = (size_t)T * C, TT = (size_t)NH * T * T;
    real *l_ln1 = a.ln1 + l * TC, *l_ln1_mean = a.ln1_mean + l * T, *l_ln1_rstd = a.ln1_rstd + l * T;
    real *l_qkv = a.qkv + l * 3 * TC, *l_atty = a.atty + l * TC, *l_preatt = a.preatt + l * TT, *l_att = a.att + l * TT;
    real *l_attproj = a.attproj + l * TC, *l_residual2 = a.residual2 + l * TC;
    real *l_ln2 = a.ln2 + l * TC, *l_ln2_mean = a.ln2_mean + l * T, *l_ln2_rstd = a.ln2_rstd + l * T;
    real *l_fch = a.fch + l * (size_t)T * F, *l_fch_gelu = a.fch_gelu + l * (size_t)T * F;
    real *l_fcproj = a.fcproj + l * TC, *l_residual3 = a.residual3 + l * TC;
    layernorm_forward(l_ln1, l_ln1_mean, l_ln1_rstd, residual, p.ln1w + l * C, p.ln1b + l * C, T, C, model->eps);
    matmul_forward(l_qkv, l_ln1, p.qkvw + (size_t)l * C * 3 * C, p.qkvb + l * 3 * C, T, C, 3 * C);
    attention_forward(l_atty, l_preatt, l_att, l_qkv, l_qkv + C, l_qkv + 2 * C, 3 * C, 3 * C, 3 * C, C, NULL, 1, T, T,
                      NH, hs, hs, (real)(1.0 / sqrt((double)hs)));
    matmul_forward(l_attproj, l_atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, T, C, C);
    residual_forward(l_residual2, residual, l_attproj, T * C);
    layernorm_forward(l_ln2, l_ln2_mean, l_ln2_rstd, l_residual2, p.ln2w + l * C, p.ln2b + l * C, T, C, model->eps);
    matmul_forward(l_fch, l_ln2, p.fcw + (size_t)l * C * F, p.fcb + l * F, T, C, F);
    gelu_forward(l_fch_gelu, l_fch, T * F, model->tanh_gelu);
    matmul_forward(l_fcproj, l_fch_gelu, p.fcprojw + (size_t)l * F * C, p.fcprojb + l * C, T, F, C);
    residual_forward(l_residual3, l_residual2, l_fcproj, T * C);
}

/* block l's backward from grads_acts.residual3 of block l: its parameters' gradients, and dresidual
 * += the gradient of its input `residual` */
static void block_backward(GPT *model, int l, const real *residual, real *dresidual) {
    GPTConfig cfg = model->config;
    int T = model->T, C = cfg.C, F = cfg.F, NH = cfg.NH, hs = C / NH;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts, da = model->grads_acts;
    size_t TC = (size_t)T * C, TT = (size_t)NH * T * T, TF = (size_t)T * F;
    real *l_qkv = a.qkv + l * 3 * TC, *dl_qkv = da.qkv + l * 3 * TC;
    residual_backward(da.residual2 + l * TC, da.fcproj + l * TC, da.residual3 + l * TC, T * C);
    matmul_backward(da.fch_gelu + l * TF, g.fcprojw + (size_t)l * F * C, g.fcprojb + l * C, da.fcproj + l * TC,
                    a.fch_gelu + l * TF, p.fcprojw + (size_t)l * F * C, T, F, C);
    gelu_backward(da.fch + l * TF, a.fch + l * TF, da.fch_gelu + l * TF, T * F, model->tanh_gelu);
    matmul_backward(da.ln2 + l * TC, g.fcw + (size_t)l * C * F, g.fcb + l * F, da.fch + l * TF, a.ln2 + l * TC,
                    p.fcw + (size_t)l * C * F, T, C, F);
    layernorm_backward(da.residual2 + l * TC, g.ln2w + l * C, g.ln2b + l * C, da.ln2 + l * TC, a.residual2 + l * TC,
                       p.ln2w + l * C, a.ln2_mean + l * T, a.ln2_rstd + l * T, T, C);
    residual_backward(dresidual, da.attproj + l * TC, da.residual2 + l * TC, T * C);
    matmul_backward(da.atty + l * TC, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, da.attproj + l * TC,
                    a.atty + l * TC, p.attprojw + (size_t)l * C * C, T, C, C);
    attention_backward(dl_qkv, dl_qkv + C, dl_qkv + 2 * C, da.preatt + l * TT, da.datt, da.atty + l * TC, l_qkv,
                       l_qkv + C, l_qkv + 2 * C, a.att + l * TT, 3 * C, 3 * C, 3 * C, C, T, T, NH, hs, hs,
                       (real)(1.0 / sqrt((double)hs)));
    matmul_backward(da.ln1 + l * TC, g.qkvw + (size_t)l * C * 3 * C, g.qkvb + l * 3 * C, dl_qkv, a.ln1 + l * TC,
                    p.qkvw + (size_t)l * C * 3 * C, T, C, 3 * C);
    layernorm_backward(dresidual, g.ln1w + l * C, g.ln1b + l * C, da.ln1 + l * TC, residual, p.ln1w + l * C,
                       a.ln1_mean + l * T, a.ln1_rstd + l * T, T, C);
}

/* logits of model->tokens (acts.logits, acts.probs) and, with targets, the mean loss over the counted
 * positions (NaN, 0/0, when none is counted, as torch) */
static void gpt_forward(GPT *model) {
    GPTConfig cfg = model->config;
    int T = model->T, C = cfg.C, V = cfg.V, L = cfg.L, l, i;
    size_t TC = (size_t)T * C;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    encoder_forward(a.encoded, model->tokens, p.wte, p.wpe, T, C);
    for (l = 0; l < L; l++) block_forward(model, l, l == 0 ? a.encoded : a.residual3 + (l - 1) * TC);
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.residual3 + (L - 1) * TC, p.lnfw, p.lnfb, T, C, model->eps);
    matmul_forward(a.logits, a.lnf, p.whead, NULL, T, C, V);
    softmax_forward(a.probs, a.logits, T, V);
    if (model->targets) {
        real sum = 0;
        crossentropy_forward(a.losses, a.logits, model->targets, model->counted, T, V);
        for (i = 0; i < T; i++) sum += a.losses[i];
        model->mean_loss = sum / (real)model->count;
    }
}

static void gpt_zero_grad(GPT *model) {
    memset(model->grads_memory, 0, model->num_parameters * sizeof(real));
    memset(model->grads_acts_memory, 0, model->num_activations * sizeof(real));
}

/* every parameter's gradient of the mean loss (after gpt_forward with targets, gpt_zero_grad) */
static void gpt_backward(GPT *model) {
    GPTConfig cfg = model->config;
    int T = model->T, C = cfg.C, V = cfg.V, L = cfg.L, l;
    size_t TC = (size_t)T * C;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts, da = model->grads_acts;
    crossentropy_softmax_backward(da.logits, a.probs, model->targets, model->counted, model->count, T, V);
    matmul_backward(da.lnf, g.whead, NULL, da.logits, a.lnf, p.whead, T, C, V);
    layernorm_backward(da.residual3 + (L - 1) * TC, g.lnfw, g.lnfb, da.lnf, a.residual3 + (L - 1) * TC, p.lnfw,
                       a.lnf_mean, a.lnf_rstd, T, C);
    for (l = L - 1; l >= 0; l--)
        block_backward(model, l, l == 0 ? a.encoded : a.residual3 + (l - 1) * TC,
                       l == 0 ? da.encoded : da.residual3 + (l - 1) * TC);
    encoder_backward(g.wte, g.wpe, da.encoded, model->tokens, T, C);
}

/* AdamW on the whole parameter block at once (the decay applies to every parameter) */
static void gpt_update(GPT *model, double lr, double beta1, double beta2, double eps, double weight_decay, int64_t t) {
    adamw_update(model->params_memory, model->grads_memory, model->m_memory, model->v_memory, model->num_parameters,
                 lr, beta1, beta2, eps, weight_decay, t);
}

/* ----------------------------------------------------------------------------------------------
 * The contract's parameters (ports/CONTRACT.md: w_q, b_q, ... stacked along a leading block axis)
 * in and out of llm.c's tensors.
 * -------------------------------------------------------------------------------------------- */

static const char *const GPT_PARAMS[] = {"wte", "wpe", "ln1_w", "ln1_b", "w_q", "b_q", "w_k", "b_k",
                                         "w_v", "b_v", "w_o", "b_o", "ln2_w", "ln2_b", "w_1", "b_1",
                                         "w_2", "b_2", "lnf_w", "lnf_b", "w_head", NULL};
#define NUM_GPT_PARAMS 21
static const char *const *const BLOCK_PARAMS = GPT_PARAMS + 2; /* decoder_block's: ln1_w .. b_2 */
#define NUM_BLOCK_PARAMS 16

/* The tensor holding the contract's parameter `name`; for w_q, w_k, w_v (b_q, b_k, b_v) *part says
 * which third of each row of the fused qkvw (qkvb) it is: 0, 1, 2 (-1: the whole tensor). */
static real *parameter_tensor(const ParameterTensors *t, const char *name, int *part) {
    static const char *const qkv[6] = {"w_q", "w_k", "w_v", "b_q", "b_k", "b_v"};
    int k;
    *part = -1;
    for (k = 0; k < 6; k++)
        if (strcmp(name, qkv[k]) == 0) {
            *part = k % 3;
            return k < 3 ? t->qkvw : t->qkvb;
        }
    if (strcmp(name, "wte") == 0) return t->wte;
    if (strcmp(name, "wpe") == 0) return t->wpe;
    if (strcmp(name, "ln1_w") == 0) return t->ln1w;
    if (strcmp(name, "ln1_b") == 0) return t->ln1b;
    if (strcmp(name, "w_o") == 0) return t->attprojw;
    if (strcmp(name, "b_o") == 0) return t->attprojb;
    if (strcmp(name, "ln2_w") == 0) return t->ln2w;
    if (strcmp(name, "ln2_b") == 0) return t->ln2b;
    if (strcmp(name, "w_1") == 0) return t->fcw;
    if (strcmp(name, "b_1") == 0) return t->fcb;
    if (strcmp(name, "w_2") == 0) return t->fcprojw;
    if (strcmp(name, "b_2") == 0) return t->fcprojb;
    if (strcmp(name, "lnf_w") == 0) return t->lnfw;
    if (strcmp(name, "lnf_b") == 0) return t->lnfb;
    return t->whead;
}

/* The contract's shape of parameter `name`: with a leading block axis when stacked (gpt_*), one
 * block's when not (decoder_block). Returns the number of dims. */
static int parameter_shape(const char *name, GPTConfig cfg, int stacked, int64_t *dims) {
    int nd = 0;
    if (strcmp(name, "wte") == 0 || strcmp(name, "wpe") == 0) {
        dims[0] = name[1] == 't' ? cfg.V : cfg.maxT;
        dims[1] = cfg.C;
        return 2;
    }
    if (strcmp(name, "w_head") == 0) {
        dims[0] = cfg.C;
        dims[1] = cfg.V;
        return 2;
    }
    if (strncmp(name, "lnf", 3) == 0) {
        dims[0] = cfg.C;
        return 1;
    }
    if (stacked) dims[nd++] = cfg.L;
    if (name[0] == 'w') { /* w_q w_k w_v w_o: C x C; w_1: C x F; w_2: F x C */
        dims[nd++] = name[2] == '2' ? cfg.F : cfg.C;
        dims[nd++] = name[2] == '1' ? cfg.F : cfg.C;
    } else {
        dims[nd++] = strcmp(name, "b_1") == 0 ? cfg.F : cfg.C;
    }
    return nd;
}

/* count values of the contract's array `data` into (into = 1) or out of (0) the model's tensor */
static void copy_parameter(real *tensor, int part, real *data, size_t count, int C, int into) {
    size_t i, rows;
    int j;
    if (part < 0) {
        if (into) memcpy(tensor, data, count * sizeof(real));
        else memcpy(data, tensor, count * sizeof(real));
        return;
    }
    rows = count / (size_t)C; /* row i of the contract's array is columns [part C, (part+1) C) of the fused row i */
    for (i = 0; i < rows; i++)
        for (j = 0; j < C; j++) {
            real *fused = tensor + i * 3 * C + part * C + j;
            if (into) *fused = data[i * C + j];
            else data[i * C + j] = *fused;
        }
}

static const char *shape_text(int nd, const int64_t *dims) {
    static char text[128];
    int k, at = 0;
    at += snprintf(text + at, sizeof text - at, "(");
    for (k = 0; k < nd && at < 100; k++) at += snprintf(text + at, sizeof text - at, k ? ", %lld" : "%lld", (long long)dims[k]);
    snprintf(text + at, sizeof text - at, nd == 1 ? ",)" : ")");
    return text;
}

/* the members `names` of the group params into the model's parameters, each of its contract shape */
static int read_parameters(ap_call *c, ap_reply *r, GPT *model, const char *const *names, int n, int stacked) {
    int k, d;
    for (k = 0; k < n; k++) {
        int64_t dims[3];
        int nd = parameter_shape(names[k], model->config, stacked, dims), part;
        const ap_value *v = ap_group_array(c, r, "params", names[k], REAL_ARRAY, nd);
        real *tensor;
        if (!v) return AP_ERROR;
        for (d = 0; d < nd; d++)
            if (v->dims[d] != dims[d]) {
                ap_error(r, "%s: params.%s must have the shape %s", c->op, names[k], shape_text(nd, dims));
                return AP_ERROR;
            }
        tensor = parameter_tensor(&model->params, names[k], &part);
        copy_parameter(tensor, part, (real *)v->data, (size_t)v->size, model->config.C, 1);
    }
    return AP_OK;
}

/* the model's tensors t (parameters or gradients) as outputs prefix.name, in the contract's shapes */
static void write_parameters(ap_reply *r, const char *prefix, const ParameterTensors *t, GPTConfig cfg,
                             const char *const *names, int n, int stacked) {
    int k, d;
    for (k = 0; k < n; k++) {
        int64_t dims[3], size = 1;
        int nd = parameter_shape(names[k], cfg, stacked, dims), part;
        char key[64];
        real *out, *tensor = parameter_tensor(t, names[k], &part);
        for (d = 0; d < nd; d++) size *= dims[d];
        snprintf(key, sizeof key, "%s.%s", prefix, names[k]);
        out = (real *)ap_output(r, key, REAL_ARRAY, nd, dims);
        copy_parameter(tensor, part, out, (size_t)size, cfg.C, 0);
    }
}

/* ----------------------------------------------------------------------------------------------
 * Reading options and index arrays.
 * -------------------------------------------------------------------------------------------- */

static int read_approximate(ap_call *c, ap_reply *r, int *tanh_form) {
    const ap_value *a = ap_find(c, "approximate");
    *tanh_form = 0;
    if (!a || a->tag == 'N') return AP_OK;
    if (a->tag == 'S' && strcmp(a->s, "tanh") == 0) *tanh_form = 1;
    else if (a->tag != 'S' || strcmp(a->s, "none") != 0)
        return ap_error(r, "%s: approximate must be \"none\" or \"tanh\"", c->op);
    return AP_OK;
}

static real read_eps(ap_call *c) {
    double eps = 1e-5; /* torch's */
    ap_option_f64(c, "eps", &eps);
    return (real)eps;
}

static int read_num_heads(ap_call *c, ap_reply *r, int C, int *NH) {
    int64_t heads;
    if (!ap_option_i64(c, "num_heads", &heads)) return ap_error(r, "%s: num_heads is absent", c->op);
    if (heads < 1 || C % heads)
        return ap_error(r, "%s: num_heads = %lld must be a positive divisor of d_model = %d", c->op, (long long)heads, C);
    *NH = (int)heads;
    return AP_OK;
}

/* targets (T ids) and the optional ignore_index: the positions the loss counts; a counted target
 * outside [0, V) is an error naming it */
static int read_targets(ap_call *c, ap_reply *r, int T, int V, GPT *model) {
    const ap_value *tv = ap_array(c, r, "targets", AP_I64_ARRAY, 1), *iv;
    const int64_t *targets;
    unsigned char *counted;
    int64_t ignore = 0;
    int bad, i, has_ignore = 0;
    if (!tv) return AP_ERROR;
    if (tv->dims[0] != T)
        return ap_error(r, "%s: targets must hold %d token ids (one per position); got %lld", c->op, T, (long long)tv->dims[0]);
    iv = ap_find(c, "ignore_index"); /* a 0-D index travels as an integer (I); an array of one id is taken too */
    if (iv && iv->tag == 'I') {
        ignore = iv->i;
        has_ignore = 1;
    } else if ((iv = ap_optional_array(c, r, "ignore_index", AP_I64_ARRAY, -1, &bad)) != NULL) {
        if (iv->size != 1) return ap_error(r, "%s: ignore_index must be one id", c->op);
        ignore = ((const int64_t *)iv->data)[0];
        has_ignore = 1;
    } else if (bad) {
        return AP_ERROR;
    }
    targets = (const int64_t *)tv->data;
    counted = (unsigned char *)ap_scratch((size_t)T + 1);
    model->count = 0;
    for (i = 0; i < T; i++) {
        if (has_ignore && targets[i] == ignore) continue;
        if (targets[i] < 0 || targets[i] >= V)
            return ap_error(r, "%s: targets[%d] = %lld is not a token id in [0, %d]%s", c->op, i, (long long)targets[i],
                            V - 1, has_ignore ? " nor ignore_index" : " (no ignore_index given)");
        counted[i] = 1;
        model->count++;
    }
    model->targets = targets;
    model->counted = counted;
    return AP_OK;
}

static int check_finite(ap_call *c, ap_reply *r, const char *name, const ap_value *x) {
    const real *d = (const real *)x->data;
    int64_t k;
    for (k = 0; k < x->size; k++)
        if (!isfinite(d[k])) return ap_error(r, "%s: %s must be finite; found %g at flat index %lld", c->op, name, (double)d[k], (long long)k);
    return AP_OK;
}

/* ----------------------------------------------------------------------------------------------
 * The operations.
 * -------------------------------------------------------------------------------------------- */

static int op_softmax(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", REAL_ARRAY, -1);
    const real *xd;
    int64_t k, n;
    if (!x) return AP_ERROR;
    if (x->ndim < 1) return ap_error(r, "softmax: x must have at least one dimension");
    xd = (const real *)x->data;
    for (k = 0; k < x->size; k++)
        if (isnan(xd[k]) || xd[k] == INFINITY) return ap_error(r, "softmax: x contains NaN or +Inf at flat index %lld", (long long)k);
    n = x->dims[x->ndim - 1];
    softmax_forward((real *)ap_output(r, "y", REAL_ARRAY, x->ndim, x->dims), xd, (int)(n ? x->size / n : 0), (int)n);
    return AP_OK;
}

static int read_mask(ap_call *c, ap_reply *r, int Tq, int Tk, const real **mask) {
    int bad;
    const ap_value *m = ap_optional_array(c, r, "mask", REAL_ARRAY, 2, &bad);
    *mask = NULL;
    if (bad) return AP_ERROR;
    if (m && (m->dims[0] != Tq || m->dims[1] != Tk))
        return ap_error(r, "%s: mask must be %d x %d (query x key)", c->op, Tq, Tk);
    if (m) *mask = (const real *)m->data;
    return AP_OK;
}

static int op_sdpa(ap_call *c, ap_reply *r) {
    const ap_value *q = ap_array(c, r, "q", REAL_ARRAY, 2), *k = NULL, *v = NULL;
    const real *mask;
    int Tq, Tk, dk, dv;
    int64_t dims[2];
    double scale;
    real *out, *att;
    if (!q || !(k = ap_array(c, r, "k", REAL_ARRAY, 2)) || !(v = ap_array(c, r, "v", REAL_ARRAY, 2))) return AP_ERROR;
    Tq = (int)q->dims[0];
    Tk = (int)k->dims[0];
    dk = (int)q->dims[1];
    dv = (int)v->dims[1];
    if (k->dims[1] != dk || v->dims[0] != Tk)
        return ap_error(r, "scaled_dot_product_attention: q (%d x %d), k %s and v (%lld x %d) do not fit", Tq, dk,
                        shape_text(2, k->dims), (long long)v->dims[0], dv);
    if (read_mask(c, r, Tq, Tk, &mask)) return AP_ERROR;
    if (!ap_option_f64(c, "scale", &scale)) scale = 1.0 / sqrt((double)dk);
    dims[0] = Tq;
    dims[1] = dv;
    out = (real *)ap_output(r, "output", REAL_ARRAY, 2, dims);
    dims[1] = Tk;
    att = (real *)ap_output(r, "weights", REAL_ARRAY, 2, dims);
    attention_forward(out, alloc_real((size_t)Tq * Tk), att, (const real *)q->data, (const real *)k->data,
                      (const real *)v->data, dk, dk, dv, dv, mask, 0, Tq, Tk, 1, dk, dv, (real)scale);
    return AP_OK;
}

/* an optional bias of length n */
static int read_bias(ap_call *c, ap_reply *r, const char *name, int n, const real **bias) {
    int bad;
    const ap_value *b = ap_optional_array(c, r, name, REAL_ARRAY, 1, &bad);
    *bias = NULL;
    if (bad) return AP_ERROR;
    if (b && b->dims[0] != n) return ap_error(r, "%s: %s must have length %d", c->op, name, n);
    if (b) *bias = (const real *)b->data;
    return AP_OK;
}

static int op_self_attention(ap_call *c, ap_reply *r) {
    static const char *const weights[3] = {"w_q", "w_k", "w_v"}, *const biases[3] = {"b_q", "b_k", "b_v"};
    static const char *const outs[3] = {"q", "k", "v"};
    const ap_value *x = ap_array(c, r, "x", REAL_ARRAY, 2), *w[3];
    const real *b[3], *mask;
    real *proj[3];
    int T, C, OC[3], i;
    int64_t dims[2];
    double scale;
    if (!x) return AP_ERROR;
    T = (int)x->dims[0];
    C = (int)x->dims[1];
    for (i = 0; i < 3; i++) {
        if (!(w[i] = ap_array(c, r, weights[i], REAL_ARRAY, 2))) return AP_ERROR;
        if (w[i]->dims[0] != C) return ap_error(r, "self_attention: %s must have %d rows (x's features)", weights[i], C);
        OC[i] = (int)w[i]->dims[1];
        if (read_bias(c, r, biases[i], OC[i], &b[i])) return AP_ERROR;
    }
    if (OC[0] != OC[1]) return ap_error(r, "self_attention: w_q and w_k need one output width");
    if (read_mask(c, r, T, T, &mask)) return AP_ERROR;
    if (!ap_option_f64(c, "scale", &scale)) scale = 1.0 / sqrt((double)OC[0]);
    dims[0] = T;
    for (i = 0; i < 3; i++) {
        dims[1] = OC[i];
        proj[i] = (real *)ap_output(r, outs[i], REAL_ARRAY, 2, dims);
        matmul_forward(proj[i], (const real *)x->data, (const real *)w[i]->data, b[i], T, C, OC[i]);
    }
    dims[1] = T;
    {
        real *att = (real *)ap_output(r, "weights", REAL_ARRAY, 2, dims), *out;
        dims[1] = OC[2];
        out = (real *)ap_output(r, "output", REAL_ARRAY, 2, dims);
        attention_forward(out, alloc_real((size_t)T * T), att, proj[0], proj[1], proj[2], OC[0], OC[1], OC[2], OC[2],
                          mask, 0, T, T, 1, OC[0], OC[2], (real)scale);
    }
    return AP_OK;
}

static int op_mha(ap_call *c, ap_reply *r) {
    static const char *const inputs[3] = {"query", "key", "value"};
    static const char *const weights[4] = {"w_q", "w_k", "w_v", "w_o"}, *const biases[4] = {"b_q", "b_k", "b_v", "b_o"};
    const ap_value *x[3], *w[4];
    const real *b[4], *mask;
    real *proj[3], *atty, *att, *out;
    int Tq, Tk, C, NH, i;
    int64_t dims[3];
    for (i = 0; i < 3; i++)
        if (!(x[i] = ap_array(c, r, inputs[i], REAL_ARRAY, 2))) return AP_ERROR;
    Tq = (int)x[0]->dims[0];
    Tk = (int)x[1]->dims[0];
    C = (int)x[0]->dims[1];
    if (x[1]->dims[1] != C || x[2]->dims[1] != C || x[2]->dims[0] != Tk)
        return ap_error(r, "multi_head_attention: query, key and value need one d_model, key and value one n_k");
    if (read_num_heads(c, r, C, &NH)) return AP_ERROR;
    for (i = 0; i < 4; i++) {
        if (!(w[i] = ap_array(c, r, weights[i], REAL_ARRAY, 2))) return AP_ERROR;
        if (w[i]->dims[0] != C || w[i]->dims[1] != C)
            return ap_error(r, "multi_head_attention: %s must be %d x %d", weights[i], C, C);
        if (read_bias(c, r, biases[i], C, &b[i])) return AP_ERROR;
    }
    if (read_mask(c, r, Tq, Tk, &mask)) return AP_ERROR;
    for (i = 0; i < 3; i++) {
        int n = (int)x[i]->dims[0];
        proj[i] = alloc_real((size_t)n * C);
        matmul_forward(proj[i], (const real *)x[i]->data, (const real *)w[i]->data, b[i], n, C, C);
    }
    atty = alloc_real((size_t)Tq * C);
    dims[0] = NH;
    dims[1] = Tq;
    dims[2] = Tk;
    att = (real *)ap_output(r, "weights", REAL_ARRAY, 3, dims);
    attention_forward(atty, alloc_real((size_t)NH * Tq * Tk), att, proj[0], proj[1], proj[2], C, C, C, C, mask, 0, Tq,
                      Tk, NH, C / NH, C / NH, (real)(1.0 / sqrt((double)(C / NH))));
    dims[0] = Tq;
    dims[1] = C;
    out = (real *)ap_output(r, "output", REAL_ARRAY, 2, dims);
    matmul_forward(out, atty, (const real *)w[3]->data, b[3], Tq, C, C);
    return AP_OK;
}

static int op_layer_norm(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", REAL_ARRAY, 2);
    const real *weight, *bias;
    int N, C;
    if (!x) return AP_ERROR;
    N = (int)x->dims[0];
    C = (int)x->dims[1];
    if (N < 1 || C < 1) return ap_error(r, "layer_norm: x must hold at least one token and one feature");
    if (check_finite(c, r, "x", x) || read_bias(c, r, "weight", C, &weight) || read_bias(c, r, "bias", C, &bias)) return AP_ERROR;
    layernorm_forward((real *)ap_output(r, "y", REAL_ARRAY, 2, x->dims), alloc_real((size_t)N), alloc_real((size_t)N),
                      (const real *)x->data, weight, bias, N, C, read_eps(c));
    return AP_OK;
}

static int op_rms_norm(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", REAL_ARRAY, 2);
    const real *weight, *xd;
    real *y, eps = read_eps(c);
    int N, C, i, j;
    if (!x) return AP_ERROR;
    N = (int)x->dims[0];
    C = (int)x->dims[1];
    if (N < 1 || C < 1) return ap_error(r, "rms_norm: x must hold at least one token and one feature");
    if (check_finite(c, r, "x", x) || read_bias(c, r, "weight", C, &weight)) return AP_ERROR;
    xd = (const real *)x->data;
    y = (real *)ap_output(r, "y", REAL_ARRAY, 2, x->dims);
    for (i = 0; i < N; i++) { /* x / sqrt(mean(x^2) + eps) * weight: no kernel of llm.c's, GPT-2 has no RMSNorm */
        real ms = 0, root;
        for (j = 0; j < C; j++) ms += xd[i * C + j] * xd[i * C + j];
        root = (real)sqrt((double)(ms / C + eps));
        for (j = 0; j < C; j++) y[i * C + j] = weight ? xd[i * C + j] / root * weight[j] : xd[i * C + j] / root;
    }
    return AP_OK;
}

static int op_gelu(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", REAL_ARRAY, 2);
    int tanh_form;
    if (!x || read_approximate(c, r, &tanh_form) || check_finite(c, r, "x", x)) return AP_ERROR;
    gelu_forward((real *)ap_output(r, "y", REAL_ARRAY, 2, x->dims), (const real *)x->data, (int)x->size, tanh_form);
    return AP_OK;
}

static int op_feed_forward(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", REAL_ARRAY, 2), *w1 = NULL, *w2 = NULL;
    const real *b1, *b2;
    real *fch, *fch_gelu;
    int T, C, F, tanh_form;
    if (!x || !(w1 = ap_array(c, r, "w_1", REAL_ARRAY, 2)) || !(w2 = ap_array(c, r, "w_2", REAL_ARRAY, 2))) return AP_ERROR;
    T = (int)x->dims[0];
    C = (int)x->dims[1];
    F = (int)w1->dims[1];
    if (w1->dims[0] != C || w2->dims[0] != F || w2->dims[1] != C)
        return ap_error(r, "feed_forward: w_1 must be %d x d_ff and w_2 d_ff x %d (d_ff = %d: w_1's columns)", C, C, F);
    if (!ap_array(c, r, "b_1", REAL_ARRAY, 1) || !ap_array(c, r, "b_2", REAL_ARRAY, 1)) return AP_ERROR; /* required */
    if (read_bias(c, r, "b_1", F, &b1) || read_bias(c, r, "b_2", C, &b2) || read_approximate(c, r, &tanh_form)) return AP_ERROR;
    fch = alloc_real((size_t)T * F);
    fch_gelu = alloc_real((size_t)T * F);
    matmul_forward(fch, (const real *)x->data, (const real *)w1->data, b1, T, C, F);
    gelu_forward(fch_gelu, fch, T * F, tanh_form);
    matmul_forward((real *)ap_output(r, "y", REAL_ARRAY, 2, x->dims), fch_gelu, (const real *)w2->data, b2, T, F, C);
    return AP_OK;
}

static int op_decoder_block(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", REAL_ARRAY, 2), *w1;
    GPTConfig cfg;
    GPT model;
    int T;
    memset(&model, 0, sizeof model);
    if (!x || !(w1 = ap_group_array(c, r, "params", "w_1", REAL_ARRAY, 2))) return AP_ERROR;
    T = (int)x->dims[0];
    cfg.V = 0; /* one block: no embeddings, no head */
    cfg.maxT = 0;
    cfg.L = 1;
    cfg.C = (int)x->dims[1];
    cfg.F = (int)w1->dims[1];
    if (T < 1 || cfg.C < 1) return ap_error(r, "decoder_block: x must hold at least one token and one feature");
    if (read_num_heads(c, r, cfg.C, &cfg.NH) || read_approximate(c, r, &model.tanh_gelu)) return AP_ERROR;
    model.eps = read_eps(c);
    gpt_build(&model, cfg, T);
    if (read_parameters(c, r, &model, BLOCK_PARAMS, NUM_BLOCK_PARAMS, 0)) return AP_ERROR;
    block_forward(&model, 0, (const real *)x->data);
    memcpy(ap_output(r, "y", REAL_ARRAY, 2, x->dims), model.acts.residual3, (size_t)T * cfg.C * sizeof(real));
    return AP_OK;
}

/* the model of gpt_forward, gpt_grads, gpt_train: its shape from params, its parameters, its tokens */
static int read_gpt(ap_call *c, ap_reply *r, GPT *model) {
    const ap_value *wte, *wpe, *ln1w, *w1, *tokens;
    GPTConfig cfg;
    int T, i;
    memset(model, 0, sizeof *model);
    if (!(wte = ap_group_array(c, r, "params", "wte", REAL_ARRAY, 2)) || !(wpe = ap_group_array(c, r, "params", "wpe", REAL_ARRAY, 2)) ||
        !(ln1w = ap_group_array(c, r, "params", "ln1_w", REAL_ARRAY, 2)) || !(w1 = ap_group_array(c, r, "params", "w_1", REAL_ARRAY, 3)) ||
        !(tokens = ap_array(c, r, "tokens", AP_I64_ARRAY, 1)))
        return AP_ERROR;
    cfg.V = (int)wte->dims[0];
    cfg.C = (int)wte->dims[1];
    cfg.maxT = (int)wpe->dims[0];
    cfg.L = (int)ln1w->dims[0];
    cfg.F = (int)w1->dims[2];
    if (cfg.V < 1 || cfg.C < 1 || cfg.L < 1) return ap_error(r, "%s: params.wte must be vocab x d and params.ln1_w n_layer x d, each >= 1", c->op);
    T = (int)tokens->dims[0];
    if (T < 1 || T > cfg.maxT) return ap_error(r, "%s: %d tokens; params.wpe has n_ctx = %d positions (1 token at least)", c->op, T, cfg.maxT);
    for (i = 0; i < T; i++) {
        int64_t t = ((const int64_t *)tokens->data)[i];
        if (t < 0 || t >= cfg.V) return ap_error(r, "%s: tokens[%d] = %lld is not a token id in [0, %d]", c->op, i, (long long)t, cfg.V - 1);
    }
    if (read_num_heads(c, r, cfg.C, &cfg.NH) || read_approximate(c, r, &model->tanh_gelu)) return AP_ERROR;
    model->eps = read_eps(c);
    gpt_build(model, cfg, T);
    model->tokens = (const int64_t *)tokens->data;
    return read_parameters(c, r, model, GPT_PARAMS, NUM_GPT_PARAMS, 1);
}

static int op_gpt_forward(ap_call *c, ap_reply *r) {
    GPT model;
    int64_t dims[2];
    if (read_gpt(c, r, &model)) return AP_ERROR;
    gpt_forward(&model);
    dims[0] = model.T;
    dims[1] = model.config.V;
    memcpy(ap_output(r, "logits", REAL_ARRAY, 2, dims), model.acts.logits, (size_t)model.T * model.config.V * sizeof(real));
    return AP_OK;
}

static int op_gpt_grads(ap_call *c, ap_reply *r) {
    GPT model;
    if (read_gpt(c, r, &model) || read_targets(c, r, model.T, model.config.V, &model)) return AP_ERROR;
    if (model.count == 0) return ap_error(r, "gpt_grads: every target equals ignore_index: the loss is 0 / 0 and has no gradient");
    gpt_forward(&model);
    gpt_zero_grad(&model);
    gpt_backward(&model);
    *(real *)ap_output(r, "loss", REAL_ARRAY, 0, NULL) = model.mean_loss;
    write_parameters(r, "grads", &model.grads, model.config, GPT_PARAMS, NUM_GPT_PARAMS, 1);
    return AP_OK;
}

/* llm.c's training loop on one batch: forward, zero_grad, backward, update, `steps` times */
static int op_gpt_train(ap_call *c, ap_reply *r) {
    GPT model;
    int64_t steps, step;
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, weight_decay = 0.01;
    real *losses;
    if (read_gpt(c, r, &model) || read_targets(c, r, model.T, model.config.V, &model)) return AP_ERROR;
    if (!ap_option_i64(c, "steps", &steps) || steps < 1) return ap_error(r, "gpt_train: steps must be an integer >= 1");
    if (model.count == 0) return ap_error(r, "gpt_train: every target equals ignore_index: the loss is 0 / 0 and has no gradient");
    ap_option_f64(c, "lr", &lr);
    ap_option_f64(c, "beta1", &beta1);
    ap_option_f64(c, "beta2", &beta2);
    ap_option_f64(c, "weight_decay", &weight_decay);
    losses = (real *)ap_output(r, "losses", REAL_ARRAY, 1, &steps);
    for (step = 1; step <= steps; step++) {
        gpt_forward(&model);
        gpt_zero_grad(&model);
        gpt_backward(&model);
        losses[step - 1] = model.mean_loss;
        gpt_update(&model, lr, beta1, beta2, ADAM_EPS, weight_decay, step);
    }
    write_parameters(r, "params", &model.params, model.config, GPT_PARAMS, NUM_GPT_PARAMS, 1);
    return AP_OK;
}

static int op_lm_loss(ap_call *c, ap_reply *r) {
    const ap_value *logits = ap_array(c, r, "logits", REAL_ARRAY, 2);
    GPT model; /* only its targets */
    real *losses, sum = 0;
    int T, V, i;
    if (!logits) return AP_ERROR;
    T = (int)logits->dims[0];
    V = (int)logits->dims[1];
    if (T < 1 || V < 1) return ap_error(r, "lm_loss: logits must hold at least one position and one token");
    if (check_finite(c, r, "logits", logits) || read_targets(c, r, T, V, &model)) return AP_ERROR;
    losses = alloc_real((size_t)T);
    crossentropy_forward(losses, (const real *)logits->data, model.targets, model.counted, T, V);
    for (i = 0; i < T; i++) sum += losses[i];
    *(real *)ap_output(r, "loss", REAL_ARRAY, 0, NULL) = sum / (real)model.count; /* none counted: 0 / 0, NaN */
    return AP_OK;
}

static int op_adamw_step(ap_call *c, ap_reply *r) {
    static const char *const names[4] = {"param", "grad", "m", "v"};
    const ap_value *a[4];
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
    int64_t step;
    real *out[3];
    int i, d;
    for (i = 0; i < 4; i++) {
        if (!(a[i] = ap_array(c, r, names[i], REAL_ARRAY, -1))) return AP_ERROR;
        if (a[i]->ndim != a[0]->ndim) return ap_error(r, "adamw_step: param, grad, m and v must have one shape");
        for (d = 0; d < a[0]->ndim; d++)
            if (a[i]->dims[d] != a[0]->dims[d]) return ap_error(r, "adamw_step: param, grad, m and v must have one shape");
    }
    if (!ap_option_i64(c, "step", &step) || step < 1) return ap_error(r, "adamw_step: step must be an integer >= 1");
    ap_option_f64(c, "lr", &lr);
    ap_option_f64(c, "beta1", &beta1);
    ap_option_f64(c, "beta2", &beta2);
    ap_option_f64(c, "eps", &eps);
    ap_option_f64(c, "weight_decay", &weight_decay);
    for (i = 0; i < 3; i++) {
        out[i] = (real *)ap_output(r, names[i == 0 ? 0 : i + 1], REAL_ARRAY, a[0]->ndim, a[0]->dims);
        memcpy(out[i], a[i == 0 ? 0 : i + 1]->data, (size_t)a[0]->size * sizeof(real));
    }
    adamw_update(out[0], (const real *)a[1]->data, out[1], out[2], (size_t)a[0]->size, lr, beta1, beta2, eps,
                 weight_decay, step);
    return AP_OK;
}

static const ap_op OPS[] = {
    {"softmax", op_softmax},
    {"scaled_dot_product_attention", op_sdpa},
    {"self_attention", op_self_attention},
    {"multi_head_attention", op_mha},
    {"layer_norm", op_layer_norm},
    {"rms_norm", op_rms_norm},
    {"gelu", op_gelu},
    {"feed_forward", op_feed_forward},
    {"decoder_block", op_decoder_block},
    {"gpt_forward", op_gpt_forward},
    {"gpt_grads", op_gpt_grads},
    {"gpt_train", op_gpt_train},
    {"lm_loss", op_lm_loss},
    {"adamw_step", op_adamw_step},
    {0, 0},
};

int main(void) {
    ap_port port = {IS_DOUBLE ? "llm.c-structured GPT-2 in C (float64) 1.0" : "llm.c-structured GPT-2 in C (float32) 1.0",
                    OPS, IS_DOUBLE ? "float64" : "float32", "zeros"};
    return ap_serve(&port);
}
