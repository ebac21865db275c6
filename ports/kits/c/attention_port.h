/* attention_port.h: the attention-ports protocol (version 1) for a port written in C or C++.
 *
 * One header, C99, no dependency but libc and libm; usable from C++. Include it in ONE source file
 * of your port, define your operations, and call ap_serve() from main():
 *
 *     #include "attention_port.h"
 *     static int softmax(ap_call *c, ap_reply *r) {
 *         const ap_value *x = ap_array(c, r, "x", AP_F64, 2);     // row-major, x->dims[0] rows
 *         if (!x) return AP_ERROR;                                  // ap_array said why
 *         double *y = ap_output(r, "y", AP_F64, x->ndim, x->dims);
 *         ...                                                        // fill y
 *         return AP_OK;
 *     }
 *     static const ap_op OPS[] = {{"softmax", softmax}, {0, 0}};
 *     int main(void) {
 *         ap_port port = {"my port 0.1", OPS, "float64", "zeros"};
 *         return ap_serve(&port);
 *     }
 *
 * The operations, their arguments' and outputs' names and their shapes are ports/CONTRACT.md's (read
 * its R lines: this port has R's shapes, held row-major). Build with a line such as
 * `cc -std=c99 -O2 -I<this folder> -o port port.c -lm`, this header the first #include.
 *
 * The protocol is docs/protocol.md (and attention_ports/runtimes/protocol.json). This header
 * declares the port row-major and 0-based: an array arrives with the reference shape (dims[0] is
 * the slowest axis: x[i * dims[1] + j] is x[i, j]), exactly as NumPy holds it; class indices count
 * from 0. The suite starts the program with two private pipes (their numbers in
 * $ATTENTION_PORTS_WORKER_FDS); stdout and stderr are yours: print freely, they are captured and
 * shown with the case that printed them.
 *
 * A named group (the `params` of decoder_block, gpt_forward, ...) arrives as one argument; read each
 * member with ap_group_array(c, r, "params", "w_q", AP_F64_ARRAY, 2). A 0-D index (ignore_index)
 * comes as a 0-D AP_I64_ARRAY (docs/protocol.md), as ports/c/gpt.c (a whole GPT-2 on this header)
 * reads it.
 *
 * Memory: every value of a call and every output lives until the reply is sent; then its memory
 * serves the next call (keep no pointer into it). An input array may lie in the request itself.
 * Errors: return ap_error(r, "fmt", ...) from an operation; it becomes that case's error with your
 * message. A crash, an exit or a hang ends only this process: the suite reports that case and
 * starts the program again.
 */
#ifndef ATTENTION_PORT_H
#define ATTENTION_PORT_H

/* Strict ISO C (-std=c99, as docs/protocol.md's manifest builds) hides POSIX's clock_gettime: ask
 * for it when no feature macro is set. It takes effect when this header is the first #include (as
 * above); otherwise the kit times a call with clock() (processor time), so it compiles either way. */
#if defined(__STRICT_ANSI__) && !defined(_POSIX_C_SOURCE) && !defined(_XOPEN_SOURCE) && !defined(_GNU_SOURCE) && \
    !defined(_DEFAULT_SOURCE) && !defined(_BSD_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>
#include <sys/uio.h>
#if defined(__linux__)
#include <signal.h>
#include <sys/prctl.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define AP_PROTOCOL_VERSION 1
#define AP_MAX_NDIM 32
#define AP_OK 0
#define AP_ERROR 1

/* Element types, with the protocol's value tags: scalars / arrays. */
typedef enum {
    AP_NONE = 'N', AP_BOOL = 'B', AP_I64 = 'I', AP_F64 = 'F', AP_F32 = 'f', AP_F16 = 'h', AP_BF16 = 'b', AP_STR = 'S',
    AP_F64_ARRAY = 'A', AP_I64_ARRAY = 'Z', AP_BOOL_ARRAY = 'K', AP_F32_ARRAY = 'a', AP_F16_ARRAY = 'g',
    AP_BF16_ARRAY = 'w', AP_GROUP = 'T', AP_LIST = 'V'
} ap_tag;

typedef struct ap_value ap_value;
struct ap_value {
    char tag;          /* an ap_tag */
    char mode;         /* an argument's: 'p' positional, 'k' by name; a member's: 0 */
    const char *name;  /* an argument's or group member's name; "" in a list */
    /* scalars */
    int b;
    int64_t i;
    double f;          /* F, f, h, b: the value as a double (exact) */
    const char *s;     /* S: NUL-terminated UTF-8 */
    /* arrays: the port's (row-major) shape; data aligned, little-endian elements of the tag's type */
    int ndim;
    int64_t dims[AP_MAX_NDIM];
    int64_t size;
    void *data;        /* double*, float*, int64_t*, uint8_t* (bool), uint16_t* (f16/bf16 bits) */
    /* groups and lists */
    uint32_t n;
    ap_value *items;
};

typedef struct {
    const char *op;
    uint32_t nargs;
    ap_value *args;
} ap_call;

typedef struct ap_reply ap_reply;
typedef int (*ap_fn)(ap_call *call, ap_reply *reply);
typedef struct {
    const char *name;
    ap_fn fn;
} ap_op;

typedef struct {
    const char *description;  /* one line: the port and its version */
    const ap_op *ops;         /* ended by {0, 0}; the declaration's operations */
    const char *precision;    /* "float64" (NULL: the same), "float32", ... (docs/precision.md) */
    const char *masked_query; /* "zeros" (NULL: the same), "nan" or "uniform" */
} ap_port;

int ap_serve(const ap_port *port);
const ap_value *ap_find(const ap_call *c, const char *name);
const ap_value *ap_array(const ap_call *c, ap_reply *r, const char *name, char elem, int ndim);
const ap_value *ap_optional_array(const ap_call *c, ap_reply *r, const char *name, char elem, int ndim, int *bad);
const ap_value *ap_member(const ap_value *group, const char *name);
const ap_value *ap_group_array(const ap_call *c, ap_reply *r, const char *group, const char *member, char elem, int ndim);
int ap_option_f64(const ap_call *c, const char *name, double *out);
int ap_option_i64(const ap_call *c, const char *name, int64_t *out);
void *ap_output(ap_reply *r, const char *name, char elem, int ndim, const int64_t *dims);
void *ap_scratch(size_t bytes);  /* zeroed working memory, freed after the reply */
int ap_error(ap_reply *r, const char *fmt, ...);
float ap_half_to_float(uint16_t h);
float ap_bf16_to_float(uint16_t b);

/* ----------------------------------------------------------------------------------------------
 * The implementation. Everything below is static to the one file that includes this header.
 * -------------------------------------------------------------------------------------------- */

typedef struct {
    char *name;
    char tag;
    int ndim;
    int64_t dims[AP_MAX_NDIM];
    int64_t size;
    void *data;
} ap__out;

struct ap_reply {
    ap__out *outs;
    uint32_t n, cap;
    char *error;  /* set by ap_error: the reply is 'E' */
};

/* The call's memory: one arena, reused call after call, so that a call allocates nothing and
 * touches no fresh page once the arena has grown to a call's size (a 4 MiB array cost ~1 ms of page
 * faults per call with calloc and free). What does not fit is malloc'd, freed after the reply, and
 * the arena grown to hold it all next time. */
static uint8_t *ap__arena;
static size_t ap__arena_cap, ap__arena_used, ap__overflow;
static void **ap__blocks;
static size_t ap__nblocks, ap__capblocks;

static void ap__die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "attention_port.h: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(3);
}

/* n bytes, 16-byte aligned, not zeroed; alive until the reply is sent */
static void *ap__alloc_raw(size_t n) {
    size_t need = n ? (n + 15) & ~(size_t)15 : 16;
    void *p;
    if (need < n) ap__die("out of memory (%zu bytes)", n);
    if (ap__arena_cap - ap__arena_used >= need) {
        p = ap__arena + ap__arena_used;
        ap__arena_used += need;
        return p;
    }
    p = malloc(need);
    if (!p) ap__die("out of memory (%zu bytes)", n);
    if (ap__nblocks == ap__capblocks) {
        ap__capblocks = ap__capblocks ? 2 * ap__capblocks : 64;
        ap__blocks = (void **)realloc(ap__blocks, ap__capblocks * sizeof(void *));
        if (!ap__blocks) ap__die("out of memory");
    }
    ap__blocks[ap__nblocks++] = p;
    ap__overflow += need;
    return p;
}

static void *ap__alloc(size_t n) {
    void *p = ap__alloc_raw(n);
    memset(p, 0, n);
    return p;
}

void *ap_scratch(size_t bytes) { return ap__alloc(bytes); }

static void ap__free_all(void) {
    size_t k;
    for (k = 0; k < ap__nblocks; k++) free(ap__blocks[k]);
    ap__nblocks = 0;
    if (ap__overflow) {  /* next time, the whole of such a call fits in the arena */
        size_t cap = ap__arena_used + ap__overflow;
        free(ap__arena);
        cap += cap / 4 + 4096;
        ap__arena = (uint8_t *)malloc(cap);
        ap__arena_cap = ap__arena ? cap : 0;
        ap__overflow = 0;
    }
    ap__arena_used = 0;
}

/* --- reading a body: every length checked against what is left ---------------------------- */
typedef struct {
    const uint8_t *p;
    size_t left;
    const char *error;  /* the first problem */
} ap__reader;

static const uint8_t *ap__take(ap__reader *rd, size_t n) {
    const uint8_t *at;
    if (rd->error) return NULL;
    if (n > rd->left) {
        rd->error = "truncated body";
        return NULL;
    }
    at = rd->p;
    rd->p += n;
    rd->left -= n;
    return at;
}

static uint64_t ap__le(const uint8_t *b, int n) {
    uint64_t v = 0;
    int k;
    for (k = n - 1; k >= 0; k--) v = (v << 8) | b[k];
    return v;
}

static uint64_t ap__uint(ap__reader *rd, int n) {
    const uint8_t *b = ap__take(rd, (size_t)n);
    return b ? ap__le(b, n) : 0;
}

static const char *ap__str(ap__reader *rd) {
    uint32_t n = (uint32_t)ap__uint(rd, 4);
    const uint8_t *b = ap__take(rd, n);
    char *s;
    if (!b) return "";
    s = (char *)ap__alloc((size_t)n + 1);
    memcpy(s, b, n);
    return s;
}

float ap_half_to_float(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

float ap_bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int ap__elem_size(char tag) {
    switch (tag) {
    case 'A': case 'Z': return 8;
    case 'a': return 4;
    case 'g': case 'w': return 2;
    case 'K': return 1;
    default: return 0;
    }
}

static void ap__value(ap__reader *rd, ap_value *v, int depth);

static void ap__array(ap__reader *rd, ap_value *v) {
    int k, es = ap__elem_size(v->tag);
    int64_t count = 1;
    const uint8_t *b;
    v->ndim = (int)ap__uint(rd, 1);
    if (v->ndim > AP_MAX_NDIM) {
        rd->error = "an array of too many dimensions";
        return;
    }
    /* the wire is column-major: its dims reversed are the row-major shape of the same bytes */
    for (k = 0; k < v->ndim; k++) {
        int64_t d = (int64_t)ap__uint(rd, 8);
        if (d < 0 || (d && count > INT64_MAX / d)) {
            rd->error = "an array of negative or absurd size";
            return;
        }
        v->dims[v->ndim - 1 - k] = d;
        count *= d;
    }
    if (rd->error) return;
    if ((uint64_t)count > rd->left / (uint64_t)es) {
        rd->error = "an array longer than the body";
        return;
    }
    v->size = count;
    b = ap__take(rd, (size_t)count * es);
    if (!b) return;
    /* the elements where they lie in the request, when aligned for their type (the request
     * outlives the call); else an aligned copy. The wire is little-endian, as this machine. */
    if ((uintptr_t)b % (uintptr_t)es == 0) {
        v->data = (void *)(uintptr_t)b;
    } else {
        v->data = ap__alloc_raw((size_t)count * es);
        memcpy(v->data, b, (size_t)count * es);
    }
}

static void ap__value(ap__reader *rd, ap_value *v, int depth) {
    const uint8_t *b;
    uint32_t k;
    if (depth > 16) {
        rd->error = "values nested more than 16 deep";
        return;
    }
    b = ap__take(rd, 1);
    if (!b) return;
    v->tag = (char)*b;
    switch (v->tag) {
    case 'N': return;
    case 'B': v->b = ap__uint(rd, 1) != 0; v->i = v->b; v->f = v->b; return;
    case 'I': v->i = (int64_t)ap__uint(rd, 8); v->f = (double)v->i; return;
    case 'F': { uint64_t u = ap__uint(rd, 8); memcpy(&v->f, &u, 8); return; }
    case 'f': { uint32_t u = (uint32_t)ap__uint(rd, 4); float x; memcpy(&x, &u, 4); v->f = x; return; }
    case 'h': v->i = (int64_t)ap__uint(rd, 2); v->f = ap_half_to_float((uint16_t)v->i); return;
    case 'b': v->i = (int64_t)ap__uint(rd, 2); v->f = ap_bf16_to_float((uint16_t)v->i); return;
    case 'S': v->s = ap__str(rd); return;
    case 'A': case 'Z': case 'K': case 'a': case 'g': case 'w': ap__array(rd, v); return;
    case 'T': case 'V':
        v->n = (uint32_t)ap__uint(rd, 4);
        if (rd->error) return;
        if (v->n > rd->left) {  /* every item takes at least one byte */
            rd->error = "a group or list longer than the body";
            return;
        }
        v->items = (ap_value *)ap__alloc((size_t)v->n * sizeof(ap_value) + 1);
        for (k = 0; k < v->n && !rd->error; k++) {
            v->items[k].name = v->tag == 'T' ? ap__str(rd) : "";
            ap__value(rd, &v->items[k], depth + 1);
        }
        return;
    default: rd->error = "an unknown value tag"; return;
    }
}

/* --- writing: the reply grows in one buffer ----------------------------------------------- */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} ap__buf;

static void ap__put(ap__buf *o, const void *data, size_t n) {
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2 + 256;
        o->p = (uint8_t *)realloc(o->p, o->cap);
        if (!o->p) ap__die("out of memory");
    }
    memcpy(o->p + o->n, data, n);
    o->n += n;
}

static void ap__put_uint(ap__buf *o, uint64_t v, int n) {
    uint8_t b[8];
    int k;
    for (k = 0; k < n; k++) b[k] = (uint8_t)(v >> (8 * k));
    ap__put(o, b, (size_t)n);
}

static void ap__put_str(ap__buf *o, const char *s) {
    size_t n = strlen(s);
    ap__put_uint(o, n, 4);
    ap__put(o, s, n);
}

/* An array's tag and dims; its elements go out as they lie (ap__reply_results) */
static void ap__put_array_head(ap__buf *o, char tag, int ndim, const int64_t *dims) {
    int k;
    ap__put(o, &tag, 1);
    ap__put_uint(o, (uint64_t)ndim, 1);
    for (k = ndim - 1; k >= 0; k--) ap__put_uint(o, (uint64_t)dims[k], 8);  /* row-major -> wire */
}

/* A reply's own bytes (all but its outputs' elements), in one buffer kept from reply to reply. */
static ap__buf ap__meta;

static int ap__fds[2] = {-1, -1};

static int ap__read_all(int fd, uint8_t *p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return got == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}

/* Every byte of iov[0..n): one writev for a whole reply, its outputs' elements not copied. */
static void ap__writev_all(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        ssize_t w = writev(fd, iov, n < 64 ? n : 64);
        if (w < 0) {
            if (errno == EINTR) continue;
            exit(0);  /* the suite is gone */
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
}

static void ap__frame_header(uint8_t *h, uint64_t id, uint64_t length) {
    int k;
    memcpy(h, "APr1", 4);
    for (k = 0; k < 8; k++) h[4 + k] = (uint8_t)(id >> (8 * k));
    for (k = 0; k < 8; k++) h[12 + k] = (uint8_t)(length >> (8 * k));
}

static void ap__send(uint64_t id, const ap__buf *body) {
    uint8_t head[20];
    struct iovec iov[2];
    ap__frame_header(head, id, body->n);
    iov[0].iov_base = head;
    iov[0].iov_len = sizeof head;
    iov[1].iov_base = body->p;
    iov[1].iov_len = body->n;
    ap__writev_all(ap__fds[1], iov, 2);
}

static void ap__send_text(uint64_t id, char kind, const char *text) {
    ap__meta.n = 0;
    ap__put(&ap__meta, &kind, 1);
    ap__put_str(&ap__meta, text);
    ap__send(id, &ap__meta);
}

/* --- the API an operation uses ------------------------------------------------------------ */
const ap_value *ap_find(const ap_call *c, const char *name) {
    uint32_t k;
    for (k = 0; k < c->nargs; k++)
        if (strcmp(c->args[k].name, name) == 0) return &c->args[k];
    return NULL;
}

int ap_error(ap_reply *r, const char *fmt, ...) {
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    r->error = (char *)ap__alloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(r->error, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return AP_ERROR;
}

static const char *ap__tag_name(char tag) {
    switch (tag) {
    case 'A': return "a float64 array"; case 'a': return "a float32 array"; case 'g': return "a float16 array";
    case 'w': return "a bfloat16 array"; case 'Z': return "an int64 array"; case 'K': return "a logical array";
    case 'F': return "a float64 scalar"; case 'f': return "a float32 scalar"; case 'I': return "an integer";
    case 'B': return "a logical scalar"; case 'S': return "a string"; case 'N': return "nothing";
    case 'T': return "a group"; case 'V': return "a list"; default: return "an unknown value";
    }
}

/* A scalar tag names its array's (AP_F64 -> AP_F64_ARRAY, ...); an array tag stays as it is. */
static char ap__array_tag(char elem) {
    switch (elem) {
    case 'F': return 'A'; case 'f': return 'a'; case 'h': return 'g';
    case 'b': return 'w'; case 'I': return 'Z'; case 'B': return 'K'; default: return elem;
    }
}

/* An optional array of element type `elem` (as ap_array's) and `ndim` dimensions (-1: any): NULL
 * when absent (or 'N'); *bad set (and r's error) when present but wrong. */
const ap_value *ap_optional_array(const ap_call *c, ap_reply *r, const char *name, char elem, int ndim, int *bad) {
    const ap_value *v = ap_find(c, name);
    *bad = 0;
    elem = ap__array_tag(elem);
    if (!v || v->tag == 'N') return NULL;
    if (v->tag != elem) {
        *bad = 1;
        ap_error(r, "%s: argument %s is %s; this port wants %s", c->op, name, ap__tag_name(v->tag), ap__tag_name(elem));
        return NULL;
    }
    if (ndim >= 0 && v->ndim != ndim) {
        *bad = 1;
        ap_error(r, "%s: argument %s has %d dimensions; this port wants %d", c->op, name, v->ndim, ndim);
        return NULL;
    }
    return v;
}

/* A required array of element type `elem` (AP_F64_ARRAY...; the scalar tags name their array) and
 * `ndim` dimensions (-1: any); NULL with the reply's error set when absent or not that. */
const ap_value *ap_array(const ap_call *c, ap_reply *r, const char *name, char elem, int ndim) {
    int bad;
    const ap_value *v;
    v = ap_optional_array(c, r, name, elem, ndim, &bad);
    if (!v && !bad) ap_error(r, "%s: the required argument %s is absent", c->op, name);
    return v;
}

/* A named group's member (a T value's item) by name; NULL when `group` is not a group or lacks it. */
const ap_value *ap_member(const ap_value *group, const char *name) {
    uint32_t k;
    if (!group || group->tag != 'T') return NULL;
    for (k = 0; k < group->n; k++)
        if (strcmp(group->items[k].name, name) == 0) return &group->items[k];
    return NULL;
}

/* A required array member of the named group argument `group` (the parameters of decoder_block,
 * gpt_forward, ...), checked as ap_array checks; errors name it `group.member`. */
const ap_value *ap_group_array(const ap_call *c, ap_reply *r, const char *group, const char *member, char elem, int ndim) {
    const ap_value *g = ap_find(c, group), *v;
    switch (elem) {
    case 'F': elem = 'A'; break; case 'f': elem = 'a'; break; case 'h': elem = 'g'; break;
    case 'b': elem = 'w'; break; case 'I': elem = 'Z'; break; case 'B': elem = 'K'; break; default: break;
    }
    if (!g || g->tag != 'T') {
        ap_error(r, "%s: the required group %s is %s", c->op, group, g ? ap__tag_name(g->tag) : "absent");
        return NULL;
    }
    if (!(v = ap_member(g, member))) {
        ap_error(r, "%s: the group %s has no member %s", c->op, group, member);
        return NULL;
    }
    if (v->tag != elem) {
        ap_error(r, "%s: %s.%s is %s; this port wants %s", c->op, group, member, ap__tag_name(v->tag), ap__tag_name(elem));
        return NULL;
    }
    if (ndim >= 0 && v->ndim != ndim) {
        ap_error(r, "%s: %s.%s has %d dimensions; this port wants %d", c->op, group, member, v->ndim, ndim);
        return NULL;
    }
    return v;
}

/* A real option (F, f, h, b, I): 1 and *out when present, 0 when absent or 'N'. */
int ap_option_f64(const ap_call *c, const char *name, double *out) {
    const ap_value *v = ap_find(c, name);
    if (!v || v->tag == 'N') return 0;
    if (v->tag == 'A' && v->size == 1) {
        *out = *(const double *)v->data;
        return 1;
    }
    *out = v->f;
    return strchr("FfhbIB", v->tag) != NULL;
}

int ap_option_i64(const ap_call *c, const char *name, int64_t *out) {
    const ap_value *v = ap_find(c, name);
    if (!v || v->tag == 'N') return 0;
    if (v->tag == 'I' || v->tag == 'B') {
        *out = v->i;
        return 1;
    }
    if (strchr("Ffhb", v->tag) && v->f == floor(v->f)) {
        *out = (int64_t)v->f;
        return 1;
    }
    return 0;
}

/* A new zeroed output named `name`, row-major, of `ndim` dims; the elements to fill. */
void *ap_output(ap_reply *r, const char *name, char elem, int ndim, const int64_t *dims) {
    ap__out *o;
    int k;
    elem = ap__array_tag(elem);
    if (r->n == r->cap) {
        ap__out *grown;
        r->cap = r->cap ? 2 * r->cap : 8;
        grown = (ap__out *)ap__alloc(r->cap * sizeof(ap__out));
        if (r->n) memcpy(grown, r->outs, r->n * sizeof(ap__out));
        r->outs = grown;
    }
    o = &r->outs[r->n++];
    o->name = (char *)ap__alloc(strlen(name) + 1);
    strcpy(o->name, name);
    o->tag = elem;
    o->ndim = ndim;
    o->size = 1;
    for (k = 0; k < ndim; k++) {
        o->dims[k] = dims[k];
        o->size *= dims[k];
    }
    o->data = ap__alloc((size_t)o->size * ap__elem_size(elem));
    return o->data;
}

/* --- the echo probe (docs/protocol.md, "Echo"): each argument back as arrays ---------------- */
static void ap__echo(ap_reply *r, const char *name, const ap_value *v) {
    int64_t one = 1;
    char *key;
    uint32_t k;
    switch (v->tag) {
    case 'N': return;
    case 'A': case 'Z': case 'K': case 'a': case 'g': case 'w':
        memcpy(ap_output(r, name, v->tag, v->ndim, v->dims), v->data, (size_t)v->size * ap__elem_size(v->tag));
        return;
    case 'F': *(double *)ap_output(r, name, 'A', 0, NULL) = v->f; return;
    case 'f': *(float *)ap_output(r, name, 'a', 0, NULL) = (float)v->f; return;
    case 'h': *(uint16_t *)ap_output(r, name, 'g', 0, NULL) = (uint16_t)v->i; return;
    case 'b': *(uint16_t *)ap_output(r, name, 'w', 0, NULL) = (uint16_t)v->i; return;
    case 'I': *(int64_t *)ap_output(r, name, 'Z', 0, NULL) = v->i; return;
    case 'B': *(uint8_t *)ap_output(r, name, 'K', 0, NULL) = (uint8_t)v->b; return;
    case 'S': {
        int64_t n = (int64_t)strlen(v->s), j;
        int64_t *o = (int64_t *)ap_output(r, name, 'Z', 1, &n);
        for (j = 0; j < n; j++) o[j] = (uint8_t)v->s[j];
        (void)one;
        return;
    }
    case 'T': case 'V':
        for (k = 0; k < v->n; k++) {
            const char *sub = v->tag == 'T' ? v->items[k].name : NULL;
            char idx[24];
            if (!sub) {
                snprintf(idx, sizeof idx, "%u", (unsigned)k);
                sub = idx;
            }
            key = (char *)ap__alloc(strlen(name) + strlen(sub) + 2);
            sprintf(key, "%s.%s", name, sub);
            ap__echo(r, key, &v->items[k]);
        }
        return;
    default: return;
    }
}

/* --- the loop ----------------------------------------------------------------------------- */
static void ap__hello(const ap_port *port) {
    ap__buf *b = &ap__meta;
    uint32_t nops = 0, k;
    while (port->ops[nops].name) nops++;
    b->n = 0;
    ap__put(b, "H", 1);
    ap__put_str(b, port->description ? port->description : "a C port");
    ap__put_str(b, "");
    ap__put(b, "T", 1);
    ap__put_uint(b, 7, 4);
    ap__put_str(b, "protocol"); ap__put(b, "I", 1); ap__put_uint(b, AP_PROTOCOL_VERSION, 8);
    ap__put_str(b, "language"); ap__put(b, "S", 1); ap__put_str(b, "C");
    ap__put_str(b, "layout"); ap__put(b, "S", 1); ap__put_str(b, "row-major");
    ap__put_str(b, "index_base"); ap__put(b, "I", 1); ap__put_uint(b, 0, 8);
    ap__put_str(b, "precision"); ap__put(b, "S", 1); ap__put_str(b, port->precision ? port->precision : "float64");
    ap__put_str(b, "masked_query"); ap__put(b, "S", 1);
    ap__put_str(b, port->masked_query ? port->masked_query : "zeros");
    ap__put_str(b, "operations"); ap__put(b, "V", 1); ap__put_uint(b, nops, 4);
    for (k = 0; k < nops; k++) {
        ap__put(b, "S", 1);
        ap__put_str(b, port->ops[k].name);
    }
    ap__send(0, b);
}

static void ap__reply_results(uint64_t id, const ap_reply *r, double seconds) {
    ap__buf *b = &ap__meta;
    uint8_t head[20];
    struct iovec *iov = (struct iovec *)ap__alloc_raw((2 * (size_t)r->n + 2) * sizeof(struct iovec));
    size_t *ends = (size_t *)ap__alloc_raw(((size_t)r->n + 1) * sizeof(size_t));
    size_t from = 0, total;
    uint64_t bits;
    uint32_t k;
    int n = 0;
    memcpy(&bits, &seconds, 8);
    b->n = 0;
    ap__put(b, "T", 1);
    ap__put_uint(b, bits, 8);
    ap__put_str(b, "");
    ap__put_uint(b, r->n, 4);
    total = 0;
    for (k = 0; k < r->n; k++) {
        ap__put_str(b, r->outs[k].name);
        ap__put_array_head(b, r->outs[k].tag, r->outs[k].ndim, r->outs[k].dims);
        ends[k] = b->n;
        total += (size_t)r->outs[k].size * ap__elem_size(r->outs[k].tag);
    }
    ap__frame_header(head, id, b->n + total);
    iov[n].iov_base = head;
    iov[n++].iov_len = sizeof head;
    for (k = 0; k < r->n; k++) {
        iov[n].iov_base = b->p + from;
        iov[n++].iov_len = ends[k] - from;
        iov[n].iov_base = r->outs[k].data;
        iov[n++].iov_len = (size_t)r->outs[k].size * ap__elem_size(r->outs[k].tag);
        from = ends[k];
    }
    iov[n].iov_base = b->p + from;
    iov[n++].iov_len = b->n - from;
    ap__writev_all(ap__fds[1], iov, n);
}

static double ap__now(void) {
#if defined(CLOCK_MONOTONIC)
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
#else  /* strict C with another header included first: no POSIX clock (see the top of this file) */
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

int ap_serve(const ap_port *port) {
    const char *fds = getenv("ATTENTION_PORTS_WORKER_FDS");
    const char *parent = getenv("ATTENTION_PORTS_PARENT_PID");
    uint8_t header[20];
    uint8_t *body = NULL;
    size_t bodycap = 0;
    uint16_t probe = 1;
    if (*(uint8_t *)&probe != 1) ap__die("a big-endian machine: the protocol is little-endian (not supported here)");
    if (!fds || sscanf(fds, "%d,%d", &ap__fds[0], &ap__fds[1]) != 2) {
        fprintf(stderr, "this is an attention-ports port: run it with `attention-ports verify --port NAME=%s`\n",
                "THIS_PROGRAM");
        return 2;
    }
#if defined(__linux__)
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  /* die with the suite */
    if (parent && (long)getppid() != atol(parent)) return 70;
#else
    (void)parent;
#endif
    ap__hello(port);
    for (;;) {
        uint64_t id, len;
        ap__reader rd;
        int got = ap__read_all(ap__fds[0], header, 20);
        if (got == 0) return 0;  /* the suite closed the pipe: done */
        if (got < 0 || memcmp(header, "APq", 3) != 0)
            ap__die("not a request frame (protocol version %d expected)", AP_PROTOCOL_VERSION);
        if (header[3] != '1') ap__die("a request of protocol version %c; this port speaks 1", header[3]);
        id = ap__le(header + 4, 8);
        len = ap__le(header + 12, 8);
        if (len > ((uint64_t)1 << 40)) ap__die("a request of %llu bytes", (unsigned long long)len);
        if (len > bodycap) {
            free(body);
            bodycap = (size_t)len;
            body = (uint8_t *)malloc(bodycap ? bodycap : 1);
            if (!body) ap__die("out of memory for a request of %llu bytes", (unsigned long long)len);
        }
        if (len && ap__read_all(ap__fds[0], body, (size_t)len) != 1) ap__die("the request stopped in the middle");
        rd.p = body;
        rd.left = (size_t)len;
        rd.error = NULL;
        {
            const uint8_t *kind = ap__take(&rd, 1);
            ap_call call;
            ap_reply reply;
            uint32_t k;
            const ap_op *op;
            double start;
            int status = AP_OK;
            memset(&call, 0, sizeof call);
            memset(&reply, 0, sizeof reply);
            if (!kind) {
                ap__send_text(id, 'E', "an empty request");
                continue;
            }
            if (*kind == 'Q') return 0;
            if (*kind != 'C') {  /* 'P' (load files) and anything later: not offered by this port */
                ap__send_text(id, 'E', "this port does not answer that request kind");
                continue;
            }
            call.op = ap__str(&rd);
            call.nargs = (uint32_t)ap__uint(&rd, 4);
            if (!rd.error && call.nargs > rd.left) rd.error = "more arguments than the body holds";
            if (!rd.error) call.args = (ap_value *)ap__alloc((size_t)call.nargs * sizeof(ap_value) + 1);
            for (k = 0; k < call.nargs && !rd.error; k++) {
                const uint8_t *mode = ap__take(&rd, 1);
                call.args[k].mode = mode ? (char)*mode : 0;
                if (mode && *mode != 'p' && *mode != 'k') rd.error = "an argument mode other than p or k";
                call.args[k].name = ap__str(&rd);
                ap__value(&rd, &call.args[k], 0);
            }
            if (!rd.error && rd.left) rd.error = "stray bytes after the arguments";
            if (rd.error) {
                char msg[256];
                snprintf(msg, sizeof msg, "malformed request: %s", rd.error);
                ap__send_text(id, 'E', msg);
                ap__free_all();
                continue;
            }
            if (strcmp(call.op, "ap.echo") == 0) {
                for (k = 0; k < call.nargs; k++) ap__echo(&reply, call.args[k].name, &call.args[k]);
                fflush(stdout);
                ap__reply_results(id, &reply, 0.0);
                ap__free_all();
                continue;
            }
            for (op = port->ops; op->name && strcmp(op->name, call.op) != 0; op++) {}
            if (!op->name) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s is not an operation of this port", call.op);
                ap__send_text(id, 'M', msg);
                ap__free_all();
                continue;
            }
            start = ap__now();
            status = op->fn(&call, &reply);
            start = ap__now() - start;
            fflush(stdout);
            fflush(stderr);
            if (status != AP_OK || reply.error)
                ap__send_text(id, 'E', reply.error ? reply.error : "the operation failed (it gave no message)");
            else
                ap__reply_results(id, &reply, start > 0 ? start : 0.0);
            ap__free_all();
        }
    }
}

#ifdef __cplusplus
}
#endif
#endif /* ATTENTION_PORT_H */
