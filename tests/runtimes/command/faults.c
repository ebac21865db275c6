/* A C-kit port that misbehaves once (tests/runtimes/command/test_faults.py; faults.py is the same
 * port with the Python kit): a correct softmax, except that the first call while the file
 * $AP_FAULT_FLAG does not exist creates it, then does what $AP_FAULT says:
 *   hang            never answers (the supervisor's timeout)
 *   crash           dereferences a null pointer (SIGSEGV)
 *   abort           abort() (SIGABRT)
 *   garbage         writes 20 bytes that are not a frame where the reply belongs, then serves on
 *   truncated       a reply header announcing 100 bytes, 10 of them, then its real reply
 *   wrong_id        a well-formed reply frame to request 999, then its real reply
 *   absurd_length   a reply header announcing 2^62 bytes, then its real reply
 *   flood           16 MiB on stdout, then its real reply
 *   endless_flood   four child processes writing to stdout without end, then its real reply
 *   escapes         a `sleep $AP_FAULT_MARKER1` in a session of its own (setsid) and a double-forked
 *                   `sleep $AP_FAULT_MARKER2` in another, once both run, then its real reply
 *   exit_mid_reply  half a reply frame, then exit(0)
 * Every later call (on the restarted worker too) is correct. */
#define _POSIX_C_SOURCE 200809L
#include "attention_port.h"
#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>

static void sleep_in_a_session_of_its_own(const char *arg, int double_fork) {
    pid_t pid = fork();
    if (pid < 0) return;
    if (pid == 0) {
        if (double_fork && fork() != 0) _exit(0);  /* the middle process leaves at once */
        setsid();
        execlp("sleep", "sleep", arg, (char *)NULL);
        _exit(127);
    }
    if (double_fork) waitpid(pid, NULL, 0);
}

/* Both sleeps, returning once both have exec'd: they hold the write end of a close-on-exec pipe
 * until then, so its read end sees EOF only when both run `sleep`. */
static void escape(const char *marker) {
    char one[128], two[128], byte;
    int ready[2];
    snprintf(one, sizeof one, "%s1", marker);
    snprintf(two, sizeof two, "%s2", marker);
    if (pipe(ready) != 0) return;
    fcntl(ready[0], F_SETFD, FD_CLOEXEC);
    fcntl(ready[1], F_SETFD, FD_CLOEXEC);
    sleep_in_a_session_of_its_own(one, 0);
    sleep_in_a_session_of_its_own(two, 1);
    close(ready[1]);
    while (read(ready[0], &byte, 1) > 0) {}
    close(ready[0]);
}

/* Bytes where the reply belongs (the kit's reply descriptor). */
static void forge(const uint8_t *p, size_t n) {
    struct iovec one;
    one.iov_base = (void *)(uintptr_t)p;
    one.iov_len = n;
    ap__writev_all(ap__fds[1], &one, 1);
}

static void frame_header(uint8_t *h, uint64_t id, uint64_t length) {
    int k;
    memcpy(h, "APr1", 4);
    for (k = 0; k < 8; k++) h[4 + k] = (uint8_t)(id >> (8 * k));
    for (k = 0; k < 8; k++) h[12 + k] = (uint8_t)(length >> (8 * k));
}

static void misbehave_once(void) {
    const char *fault = getenv("AP_FAULT"), *flag = getenv("AP_FAULT_FLAG");
    uint8_t frame[64];
    int fd;
    if (!fault || !flag) return;
    fd = open(flag, O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0) return;  /* done before */
    close(fd);
    printf("misbehaving: %s\n", fault);
    fflush(stdout);
    memset(frame, 'x', sizeof frame);
    if (strcmp(fault, "hang") == 0) {
        for (;;) pause();
    } else if (strcmp(fault, "crash") == 0) {
        volatile int *nowhere = NULL;
        *nowhere = 1;
    } else if (strcmp(fault, "abort") == 0) {
        abort();
    } else if (strcmp(fault, "garbage") == 0) {
        forge((const uint8_t *)"this is not a frame!", 20);
    } else if (strcmp(fault, "truncated") == 0) {
        frame_header(frame, 1, 100);
        forge(frame, 30);
    } else if (strcmp(fault, "wrong_id") == 0) {
        frame_header(frame, 999, 1);
        frame[20] = 'M';
        forge(frame, 21);
    } else if (strcmp(fault, "absurd_length") == 0) {
        frame_header(frame, 1, (uint64_t)1 << 62);
        forge(frame, 20);
    } else if (strcmp(fault, "flood") == 0) {
        static char line[1024];
        int k;
        memset(line, '#', sizeof line - 1);
        line[sizeof line - 2] = '\n';
        for (k = 0; k < 16 * 1024; k++) fputs(line, stdout);
        fflush(stdout);
    } else if (strcmp(fault, "endless_flood") == 0) {
        static char block[65536];
        int k;
        memset(block, '#', sizeof block);
        fflush(stdout);
        for (k = 0; k < 4; k++)
            if (fork() == 0)
                for (;;)
                    if (write(1, block, sizeof block) < 0) _exit(0);
    } else if (strcmp(fault, "escapes") == 0) {
        escape(getenv("AP_FAULT_MARKER") ? getenv("AP_FAULT_MARKER") : "987.654");
    } else if (strcmp(fault, "exit_mid_reply") == 0) {
        frame_header(frame, 1, 100);
        frame[20] = 'T';
        forge(frame, 50);
        exit(0);
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
