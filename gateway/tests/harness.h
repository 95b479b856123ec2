/* Test harness: checks, counters, pipe capture, running CGI programs. */
#ifndef HARNESS_H
#define HARNESS_H

#include <pthread.h>
#include <stddef.h>

extern int t_passed, t_failed;
extern const char *t_build;      /* build directory (CGIs, board-gen) */
extern const char *t_board_data; /* the committed board data file */
extern char t_tmp[];             /* scratch directory, removed at exit */

/* Count a check; print a message when it fails.  Returns cond. */
int check(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define CHECK(cond, ...) check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* Deterministic xorshift generator. */
unsigned long long t_rand(unsigned long long *state);

/* A growing byte buffer. */
struct buf {
    char *p;
    size_t len, cap;
};
void buf_add(struct buf *b, const void *p, size_t n);
void buf_free(struct buf *b);
int buf_eq(const struct buf *a, const struct buf *b);
/* Index of the first differing byte (for failure messages). */
size_t buf_diff_at(const struct buf *a, const struct buf *b);

/* Drain a pipe (or socket) on a thread while the test writes into it, so
 * large outputs never deadlock.  capture_start gives the write end in
 * *wfd; the test closes it, then capture_finish joins and returns the
 * bytes.  With records set, the read end is a SOCK_SEQPACKET socket and the
 * size of every record is kept as well; with slow set the reader dawdles
 * so the writer keeps blocking on a full pipe. */
struct capture {
    int rfd;
    int records, slow;
    pthread_t thread;
    struct buf data;
    size_t *rec;
    size_t nrec, rec_cap;
};
void capture_start(struct capture *c, int *wfd);
void capture_start_records(struct capture *c, int *wfd);
void capture_finish(struct capture *c);
void capture_free(struct capture *c);

/* Write n bytes to t_tmp/NAME; return the path (malloc'd). */
char *t_write_file(const char *name, const void *data, size_t n);
void t_read_file(const char *path, struct buf *out);

/* Run a program with exactly the given environment (NULL-terminated "K=V"
 * strings; ASAN_OPTIONS/UBSAN_OPTIONS are passed through), capture its
 * stdout, return its exit status (or 128+signal).  Its stderr is kept in
 * t_tmp/stderr.txt: t_dump_stderr() prints it after an unexpected result. */
int run_prog(const char *path, char *const argv[], const char *const env[],
             struct buf *out);
/* When set, programs started by run_prog get ENOSYS from openat2 (a seccomp
 * filter), as on kernels before 5.6 or under valgrind. */
extern int t_no_openat2;
/* run_prog of t_build/NAME with no arguments. */
int run_cgi(const char *name, const char *const env[], struct buf *out);
void t_dump_stderr(void);

/* Pattern bytes: p[i] depends only on i and seed. */
void t_pattern(char *p, size_t n, unsigned seed);

void test_output(void);
void test_file(void);
void test_board(void);
void test_cgi(void);

#endif
