/* A C-kit port that misbehaves once (tests/runtimes/command/test_command.py): a correct softmax,
 * except that the first call while the file $AP_FAULT_FLAG does not exist creates it, then does
 * what $AP_FAULT says:
 *   hang     never answers (the supervisor's timeout)
 *   crash    sends half a reply frame, then aborts (a crash mid-reply)
 *   garbage  writes 20 bytes that are not a frame where the reply belongs, then serves on
 * Every later call (on the restarted worker too) is correct. */
#define _POSIX_C_SOURCE 200809L
#include "attention_port.h"
#include <fcntl.h>

static void misbehave_once(void) {
    const char *fault = getenv("AP_FAULT"), *flag = getenv("AP_FAULT_FLAG");
    int fd;
    if (!fault || !flag) return;
    fd = open(flag, O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0) return;  /* done before */
    close(fd);
    printf("misbehaving: %s\n", fault);
    fflush(stdout);
    if (strcmp(fault, "hang") == 0) {
        for (;;) pause();
    } else if (strcmp(fault, "crash") == 0) {
        static const uint8_t half[] = {'A', 'P', 'r', '1', 1, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 'T'};
        ap__write_all(ap__fds[1], half, sizeof half);
        abort();
    } else if (strcmp(fault, "garbage") == 0) {
        ap__write_all(ap__fds[1], (const uint8_t *)"this is not a frame!", 20);
    }
}

static int softmax(ap_call *c, ap_reply *r) {
    const ap_value *x = ap_array(c, r, "x", AP_F64_ARRAY, 2);
    const double *xd;
    double *y;
    int64_t i, j, n;
    misbehave_once();
    if (!x) return AP_ERROR;
    xd = (const double *)x->data;
    n = x->dims[1];
    y = (double *)ap_output(r, "y", AP_F64_ARRAY, 2, x->dims);
    for (i = 0; i < x->dims[0]; i++) {
        double peak = -INFINITY, sum = 0.0;
        for (j = 0; j < n; j++) peak = xd[i * n + j] > peak ? xd[i * n + j] : peak;
        for (j = 0; j < n; j++) sum += (y[i * n + j] = exp(xd[i * n + j] - peak));
        for (j = 0; j < n; j++) y[i * n + j] /= sum;
    }
    return AP_OK;
}

static const ap_op OPS[] = {{"softmax", softmax}, {0, 0}};

int main(void) {
    ap_port port = {"a C port that misbehaves once", OPS, 0, 0};
    return ap_serve(&port);
}
