#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int t_passed, t_failed;
const char *t_build, *t_board_data;
char t_tmp[4096];
int t_no_openat2;

/* In a child before exec: make openat2 fail with ENOSYS. */
static int block_openat2(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
           prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int check(int cond, const char *file, int line, const char *fmt, ...)
{
    if (cond) {
        t_passed++;
        return 1;
    }
    t_failed++;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 0;
}

unsigned long long t_rand(unsigned long long *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

void buf_add(struct buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        if (!(b->p = realloc(b->p, cap)))
            die("realloc");
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

void buf_free(struct buf *b)
{
    free(b->p);
    *b = (struct buf){0};
}

int buf_eq(const struct buf *a, const struct buf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

size_t buf_diff_at(const struct buf *a, const struct buf *b)
{
    size_t i = 0;
    while (i < a->len && i < b->len && a->p[i] == b->p[i])
        i++;
    return i;
}

static void *drain(void *arg)
{
    struct capture *c = arg;
    size_t chunk = c->slow ? 4096 : c->records ? 1 << 20 : 256 * 1024;
    char *tmp = malloc(chunk);
    if (!tmp)
        die("malloc");
    for (;;) {
        ssize_t n = read(c->rfd, tmp, chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("capture read");
        if (n == 0)
            break;
        buf_add(&c->data, tmp, (size_t)n);
        if (c->records) {
            if (c->nrec == c->rec_cap) {
                c->rec_cap = c->rec_cap ? c->rec_cap * 2 : 256;
                if (!(c->rec = realloc(c->rec, c->rec_cap * sizeof *c->rec)))
                    die("realloc");
            }
            c->rec[c->nrec++] = (size_t)n;
        }
        if (c->slow)
            nanosleep(&(struct timespec){0, 20000}, NULL);
    }
    free(tmp);
    close(c->rfd);
    return NULL;
}

static void start(struct capture *c, int fds[2])
{
    c->rfd = fds[0];
    if (pthread_create(&c->thread, NULL, drain, c))
        die("pthread_create");
}

void capture_start(struct capture *c, int *wfd)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC))
        die("pipe");
    *wfd = fds[1];
    start(c, fds);
}

void capture_start_records(struct capture *c, int *wfd)
{
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds))
        die("socketpair");
    /* Room for the largest record a test writes. */
    int sz = 4 << 20;
    setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    c->records = 1;
    *wfd = fds[1];
    start(c, fds);
}

void capture_finish(struct capture *c)
{
    pthread_join(c->thread, NULL);
}

void capture_free(struct capture *c)
{
    buf_free(&c->data);
    free(c->rec);
    *c = (struct capture){0};
}

char *t_write_file(const char *name, const void *data, size_t n)
{
    char *path;
    if (asprintf(&path, "%s/%s", t_tmp, name) < 0)
        die("asprintf");
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f))
        die(path);
    return path;
}

void t_read_file(const char *path, struct buf *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die(path);
    char tmp[65536];
    ssize_t n;
    while ((n = read(fd, tmp, sizeof tmp)) > 0)
        buf_add(out, tmp, (size_t)n);
    if (n < 0)
        die(path);
    close(fd);
}

void t_pattern(char *p, size_t n, unsigned seed)
{
    unsigned long long s = 0x2545f4914f6cdd1dull ^ seed;
    for (size_t i = 0; i < n; i++)
        p[i] = (char)(t_rand(&s) >> 24);
}

int run_prog(const char *path, char *const argv[], const char *const env[],
             struct buf *out)
{
    const char *envp[64];
    size_t n = 0;
    for (; env[n]; n++)
        envp[n] = env[n];
    static const char *const pass[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS"};
    static char passed[2][512];
    for (size_t i = 0; i < 2; i++) {
        const char *v = getenv(pass[i]);
        if (v) {
            snprintf(passed[i], sizeof passed[i], "%s=%s", pass[i], v);
            envp[n++] = passed[i];
        }
    }
    envp[n] = NULL;

    char errpath[4200];
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", t_tmp);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC))
        die("pipe");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        int err = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (err < 0 || dup2(fds[1], 1) < 0 || dup2(err, 2) < 0 ||
            (t_no_openat2 && block_openat2()))
            _exit(126);
        execve(path, argv, (char *const *)envp);
        _exit(127);
    }
    close(fds[1]);
    char tmp[65536];
    for (;;) {
        ssize_t r = read(fds[0], tmp, sizeof tmp);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        buf_add(out, tmp, (size_t)r);
    }
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            die("waitpid");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_cgi(const char *name, const char *const env[], struct buf *out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", t_build, name);
    char *argv[] = {path, NULL};
    return run_prog(path, argv, env, out);
}

void t_dump_stderr(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/stderr.txt", t_tmp);
    struct buf b = {0};
    t_read_file(path, &b);
    fprintf(stderr, "---- program stderr ----\n%.*s------------------------\n",
            (int)b.len, b.p ? b.p : "");
    buf_free(&b);
}
