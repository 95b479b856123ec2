/*
 * gwbench — CPU cost of CGI output disciplines and file-output methods,
 * measured the way the published study did it:
 *
 *   - the gateway (this process) listens on a Unix-domain socket;
 *   - a server stub (a forked process) connects, creates a pipe, passes the
 *     pipe's write end to the gateway with SCM_RIGHTS, then reads and
 *     discards everything until EOF and reports the byte count back;
 *   - the gateway writes its workload into that fd; the figure is the
 *     gateway's user+system CPU time (getrusage(RUSAGE_SELF), after minus
 *     before), so the stub's reading cost is not counted.
 *
 * Workloads: the five bulletin-board pages, each generated as one CGI run
 * would (open the stream, render, close), repeated --board-reps times, for
 * disciplines 1-6 x buffer sizes 1K..64K; and files of 1K..3M (10M with
 * --big) sent --file-reps times with each file method.  Every configuration
 * is measured --runs times, round-robin (run 1 of everything, then run 2,
 * ...) so slow drift on a shared machine spreads over all of them.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "board_render.h"
#include "tern_gw.h"

#define K 1024
#define NDISC 6
static const size_t buf_sizes[] = {1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K};
#define NBUF (sizeof buf_sizes / sizeof buf_sizes[0])
static const size_t file_sizes[] = {1 * K,   4 * K,     16 * K,   64 * K,
                                    256 * K, 1024 * K,  3072 * K, 10240 * K};
#define NMETH 4 /* TGW_FILE_READ .. TGW_FILE_SPLICE */
static const char *const circled[] = {"", "①", "②", "③", "④", "⑤", "⑥", "⑦", "⑧"};

static struct {
    int runs, quick, big;
    unsigned board_reps, file_reps;
    size_t file_bufsize;
    const char *json, *data, *only, *tmp;
} opt = {.runs = 5, .board_reps = 2000, .file_reps = 1000, .file_bufsize = 64 * K};

static size_t nfiles; /* file sizes in the sweep: 7, or 8 with --big */

struct sample {
    double user_us, sys_us, wall_us;
};

/* One configuration's samples and their summary (µs per repetition). */
struct config {
    int variant; /* discipline 1-6, or file method */
    size_t size; /* buffer size, or file size */
    struct sample *s;
    double med, min, max, q1, q3;
};

static struct config board_cfg[NDISC * NBUF], file_cfg[NMETH * 8];
static size_t nboard, nfilecfg;

static char tmpdir[4096], sock_path[sizeof ((struct sockaddr_un *)0)->sun_path];
static int listen_fd = -1;
static tgw_board *board;
static size_t page_bytes[BOARD_PAGES + 1], rep_bytes; /* one board repetition */
static char file_paths[8][4200];

static void cleanup(void)
{
    if (listen_fd >= 0)
        unlink(sock_path);
    for (size_t i = 0; i < 8; i++)
        if (file_paths[i][0])
            unlink(file_paths[i]);
    if (tmpdir[0])
        rmdir(tmpdir);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gwbench: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s\n", errno ? ": " : "", errno ? strerror(errno) : "");
    cleanup();
    exit(1);
}

/* ---- the server stub ---------------------------------------------------- */

static void send_fd(int sock, int fd)
{
    char byte = 0;
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } ctl = {0};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = ctl.space, .msg_controllen = sizeof ctl.space};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(sock, &msg, 0) != 1)
        _exit(10);
}

static int recv_fd(int sock)
{
    char byte;
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = ctl.space, .msg_controllen = sizeof ctl.space};
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
        die("recvmsg");
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS)
        die("stub sent no descriptor");
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static void stub(void)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, sock_path, sizeof a.sun_path);
    int p[2];
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) || pipe2(p, O_CLOEXEC))
        _exit(11);
    send_fd(s, p[1]);
    close(p[1]);
    static char buf[64 * K];
    unsigned long long total = 0;
    for (;;) {
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        total += (unsigned long long)n;
    }
    _exit(write(s, &total, sizeof total) == sizeof total ? 0 : 12);
}

/* ---- one measurement ---------------------------------------------------- */

typedef void (*workload_fn)(int fd, const struct config *c);

static double tv_us(struct timeval t) { return t.tv_sec * 1e6 + t.tv_usec; }

static struct sample measure(workload_fn work, const struct config *c,
                             unsigned long long expect)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0)
        stub();
    int conn = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0)
        die("accept");
    int fd = recv_fd(conn);

    struct rusage r0, r1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    getrusage(RUSAGE_SELF, &r0);
    work(fd, c);
    getrusage(RUSAGE_SELF, &r1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    close(fd);

    unsigned long long got = 0;
    if (read(conn, &got, sizeof got) != sizeof got)
        die("stub reported nothing");
    close(conn);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            die("waitpid");
    if (got != expect) {
        errno = 0;
        die("stub received %llu bytes, expected %llu", got, expect);
    }
    return (struct sample){
        .user_us = tv_us(r1.ru_utime) - tv_us(r0.ru_utime),
        .sys_us = tv_us(r1.ru_stime) - tv_us(r0.ru_stime),
        .wall_us = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3,
    };
}

/* ---- workloads ---------------------------------------------------------- */

/* Each page is one CGI run: open the stream (allocating or mapping its
 * buffer), render, close (final flush, free or unmap). */
static int render_page(int fd, enum tgw_discipline d, size_t bufsize, int page)
{
    tgw_out *out = tgw_open(fd, d, bufsize);
    if (!out)
        return -1;
    int r = board_render_page(out, board, page, BOARD_PLAIN);
    return tgw_close(out) || r ? -1 : 0;
}

static void board_work(int fd, const struct config *c)
{
    for (unsigned i = 0; i < opt.board_reps; i++)
        for (int p = 1; p <= BOARD_PAGES; p++)
            if (render_page(fd, c->variant, c->size, p))
                die("board page %d", p);
}

static void file_work(int fd, const struct config *c)
{
    tgw_out *out = tgw_open(fd, TGW_OWN_EXACT, 0);
    size_t i = 0;
    while (file_sizes[i] != c->size)
        i++;
    for (unsigned r = 0; r < opt.file_reps; r++)
        if (tgw_send_file(out, file_paths[i], c->variant, opt.file_bufsize))
            die("%s %s", tgw_file_method_name(c->variant), file_paths[i]);
    if (tgw_close(out))
        die("close");
}

/* ---- setup -------------------------------------------------------------- */

static void setup(void)
{
    const char *base = opt.tmp ? opt.tmp : getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/gwbench-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir))
        die("mkdtemp %s", tmpdir);
    if (snprintf(sock_path, sizeof sock_path, "%s/gw.sock", tmpdir) >= (int)sizeof sock_path)
        die("socket path too long: %s", tmpdir);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, sock_path, sizeof a.sun_path);
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof a) ||
        listen(listen_fd, 4))
        die("listen on %s", sock_path);

    if (!(board = tgw_board_connect(opt.data)))
        die("board data %s", opt.data);
    /* Page sizes, so every sample can check the stub got every byte. */
    for (int p = 1; p <= BOARD_PAGES; p++) {
        FILE *f = tmpfile();
        if (!f || render_page(fileno(f), TGW_OWN_EXACT, 0, p))
            die("render page %d", p);
        struct stat st;
        fstat(fileno(f), &st);
        page_bytes[p] = (size_t)st.st_size;
        rep_bytes += page_bytes[p];
        fclose(f);
    }

    /* The files to send, written once and read once so that every method
     * finds them in the page cache. */
    size_t biggest = file_sizes[nfiles - 1];
    char *data = malloc(biggest);
    if (!data)
        die("malloc");
    for (size_t i = 0; i < biggest; i++)
        data[i] = (char)('a' + i % 26 + (i % 4093 == 0));
    for (size_t i = 0; i < nfiles; i++) {
        snprintf(file_paths[i], sizeof file_paths[i], "%s/file-%zu", tmpdir,
                 file_sizes[i]);
        int fd = open(file_paths[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, data, file_sizes[i]) != (ssize_t)file_sizes[i] ||
            close(fd))
            die("write %s", file_paths[i]);
        fd = open(file_paths[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, data, file_sizes[i]) != (ssize_t)file_sizes[i])
            die("read %s", file_paths[i]);
        close(fd);
    }
    free(data);

    for (int d = 1; d <= NDISC; d++)
        for (size_t b = 0; b < NBUF; b++)
            board_cfg[nboard++] = (struct config){.variant = d, .size = buf_sizes[b]};
    for (int m = TGW_FILE_READ; m <= TGW_FILE_SPLICE; m++)
        for (size_t f = 0; f < nfiles; f++)
            file_cfg[nfilecfg++] = (struct config){.variant = m, .size = file_sizes[f]};
    for (size_t i = 0; i < nboard; i++)
        board_cfg[i].s = calloc((size_t)opt.runs, sizeof(struct sample));
    for (size_t i = 0; i < nfilecfg; i++)
        file_cfg[i].s = calloc((size_t)opt.runs, sizeof(struct sample));
}

/* ---- statistics and reports --------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Quantile q of sorted v[0..n) by linear interpolation. */
static double quantile(const double *v, int n, double q)
{
    double pos = q * (n - 1);
    int i = (int)pos;
    return i + 1 < n ? v[i] + (pos - i) * (v[i + 1] - v[i]) : v[n - 1];
}

static void summarise(struct config *c, size_t n, unsigned reps)
{
    double v[opt.runs];
    for (size_t i = 0; i < n; i++) {
        for (int r = 0; r < opt.runs; r++)
            v[r] = (c[i].s[r].user_us + c[i].s[r].sys_us) / reps;
        qsort(v, (size_t)opt.runs, sizeof v[0], cmp_double);
        c[i].min = v[0];
        c[i].max = v[opt.runs - 1];
        c[i].med = quantile(v, opt.runs, 0.5);
        c[i].q1 = quantile(v, opt.runs, 0.25);
        c[i].q3 = quantile(v, opt.runs, 0.75);
    }
}

static const char *size_name(size_t n)
{
    static char s[4][24];
    static int k;
    char *p = s[k++ % 4];
    if (n >= K * K && n % (K * K) == 0)
        snprintf(p, 24, "%zuM", n / (K * K));
    else if (n >= K && n % K == 0)
        snprintf(p, 24, "%zuK", n / K);
    else
        snprintf(p, 24, "%zu", n);
    return p;
}

/* printf's widths count bytes; the circled digits are 3 bytes wide in UTF-8
 * but one column on screen, so pad by code points. */
static void print_left(const char *s, int width)
{
    int cols = 0;
    for (const char *p = s; *p; p++)
        cols += ((unsigned char)*p & 0xc0) != 0x80;
    printf("%s%*s", s, width > cols ? width - cols : 0, "");
}

/* Rows = variants, columns = sizes: first the medians, then min-max. */
static void table(const struct config *c, size_t ncfg, size_t ncols,
                  const size_t *cols, const char *(*row_name)(int))
{
    for (int pass = 0; pass < 2; pass++) {
        printf(pass ? "\n  spread over runs, min-max (µs per repetition)\n"
                    : "  median of runs (µs of gateway CPU per repetition)\n");
        printf("  %-17s", "");
        for (size_t j = 0; j < ncols; j++)
            printf(pass ? " %13s" : " %9s", size_name(cols[j]));
        printf("\n");
        for (size_t i = 0; i < ncfg; i += ncols) {
            printf("  ");
            print_left(row_name(c[i].variant), 17);
            for (size_t j = 0; j < ncols; j++) {
                if (pass) {
                    char cell[40];
                    snprintf(cell, sizeof cell, "%.1f-%.1f", c[i + j].min, c[i + j].max);
                    printf(" %13s", cell);
                } else {
                    printf(" %9.1f", c[i + j].med);
                }
            }
            printf("\n");
        }
    }
}

static const char *disc_row(int d)
{
    static char s[40];
    snprintf(s, sizeof s, "%s %s", circled[d], tgw_discipline_name(d));
    return s;
}

static const char *meth_row(int m)
{
    static char s[40];
    snprintf(s, sizeof s, "%s %s", m <= 8 ? circled[m] : " ", tgw_file_method_name(m));
    return s;
}

static const struct config *find(const struct config *c, size_t n, int variant,
                                 size_t size)
{
    for (size_t i = 0; i < n; i++)
        if (c[i].variant == variant && c[i].size == size)
            return &c[i];
    return NULL;
}

static const struct config *best_board;
static int best_method, method_wins[TGW_FILE_SPLICE + 1];

static void report_board(void)
{
    printf("\nBoard workload: %d pages (%zu bytes) generated %u times per run, "
           "%d runs\n", BOARD_PAGES, rep_bytes, opt.board_reps, opt.runs);
    table(board_cfg, nboard, NBUF, buf_sizes, disc_row);
    best_board = &board_cfg[0];
    for (size_t i = 1; i < nboard; i++)
        if (board_cfg[i].med < best_board->med)
            best_board = &board_cfg[i];
    /* The baseline a CGI gets without trying: stdio with BUFSIZ (8K). */
    const struct config *base = find(board_cfg, nboard, TGW_STDIO, BUFSIZ);
    printf("\nbest output discipline on this host: %s %s (%s) — %.1f µs per "
           "repetition",
           circled[best_board->variant], size_name(best_board->size),
           tgw_discipline_name(best_board->variant), best_board->med);
    if (base)
        printf(", %.1f%% less CPU than ① %s (stdio default)",
               100 * (base->med - best_board->med) / base->med, size_name(BUFSIZ));
    printf("  [published, Linux: ① 16K, +2.4%%]\n");
}

static void report_file(void)
{
    printf("\nFile workload: each file sent %u times per run, %d runs, read "
           "buffer / splice chunk %s\n", opt.file_reps, opt.runs,
           size_name(opt.file_bufsize));
    table(file_cfg, nfilecfg, nfiles, file_sizes, meth_row);
    printf("\n  lowest CPU per size:");
    double total[TGW_FILE_SPLICE + 1] = {0};
    for (size_t f = 0; f < nfiles; f++) {
        int win = TGW_FILE_READ;
        for (int m = TGW_FILE_READ; m <= TGW_FILE_SPLICE; m++) {
            total[m] += find(file_cfg, nfilecfg, m, file_sizes[f])->med;
            if (find(file_cfg, nfilecfg, m, file_sizes[f])->med <
                find(file_cfg, nfilecfg, win, file_sizes[f])->med)
                win = m;
        }
        method_wins[win]++;
        printf(" %s %s", size_name(file_sizes[f]), tgw_file_method_name(win));
    }
    best_method = TGW_FILE_READ;
    for (int m = TGW_FILE_READ + 1; m <= TGW_FILE_SPLICE; m++)
        if (method_wins[m] > method_wins[best_method] ||
            (method_wins[m] == method_wins[best_method] && total[m] < total[best_method]))
            best_method = m;
    const struct config *r1m = find(file_cfg, nfilecfg, TGW_FILE_READ, K * K);
    const struct config *m1m = find(file_cfg, nfilecfg, TGW_FILE_MMAP, K * K);
    double gain = 100 * (r1m->med - m1m->med) / r1m->med;
    printf("\n  ⑧ mmap vs ⑦ read/write at 1M: %.1f%% %s CPU  [published, "
           "Linux: mmap 54%% faster]\n",
           gain < 0 ? -gain : gain, gain < 0 ? "more" : "less");
    printf("\nbest file method on this host: %s (lowest CPU at %d of %zu sizes)\n",
           tgw_file_method_name(best_method), method_wins[best_method], nfiles);
}

static void json_samples(FILE *j, const struct config *c, size_t n,
                         const char *workload, unsigned reps, int *first)
{
    for (size_t i = 0; i < n; i++)
        for (int r = 0; r < opt.runs; r++) {
            const struct sample *s = &c[i].s[r];
            int board_w = workload[0] == 'b';
            fprintf(j, "%s\n    {\"workload\": \"%s\", \"%s\": %d, \"name\": \"%s\", "
                       "\"%s\": %zu, \"run\": %d, \"reps\": %u, \"bytes\": %llu, "
                       "\"user_us\": %.0f, \"sys_us\": %.0f, \"cpu_us\": %.0f, "
                       "\"wall_us\": %.0f, \"cpu_us_per_rep\": %.3f}",
                    *first ? "" : ",", workload, board_w ? "discipline" : "method",
                    c[i].variant,
                    board_w ? tgw_discipline_name(c[i].variant)
                            : tgw_file_method_name(c[i].variant),
                    board_w ? "bufsize" : "file_size", c[i].size, r + 1, reps,
                    (unsigned long long)reps * (board_w ? rep_bytes : c[i].size),
                    s->user_us, s->sys_us, s->user_us + s->sys_us, s->wall_us,
                    (s->user_us + s->sys_us) / reps);
            *first = 0;
        }
}

static void json_summary(FILE *j, const struct config *c, size_t n, int board_w)
{
    for (size_t i = 0; i < n; i++)
        fprintf(j, "%s\n      {\"%s\": %d, \"%s\": %zu, \"median\": %.3f, "
                   "\"min\": %.3f, \"max\": %.3f, \"q1\": %.3f, \"q3\": %.3f}",
                i ? "," : "", board_w ? "discipline" : "method", c[i].variant,
                board_w ? "bufsize" : "file_size", c[i].size, c[i].med, c[i].min,
                c[i].max, c[i].q1, c[i].q3);
}

/* s as a JSON string literal. */
static void json_str(FILE *j, const char *s)
{
    fputc('"', j);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(j, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(j, "\\u%04x", ch);
        else
            fputc(ch, j);
    }
    fputc('"', j);
}

static void write_json(int did_board, int did_file)
{
    FILE *j = fopen(opt.json, "w");
    if (!j)
        die("%s", opt.json);
    struct utsname u;
    uname(&u);
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(j, "{\n  \"tool\": \"gwbench\",\n  \"date\": \"%s\",\n", date);
    const char *const keys[] = {"sysname", "nodename", "release", "version", "machine"};
    const char *const vals[] = {u.sysname, u.nodename, u.release, u.version, u.machine};
    fprintf(j, "  \"host\": {");
    for (size_t i = 0; i < 5; i++) {
        fprintf(j, "\"%s\": ", keys[i]);
        json_str(j, vals[i]);
        fprintf(j, ", ");
    }
    fprintf(j, "\"cpus\": %ld, \"page_size\": %ld},\n",
            sysconf(_SC_NPROCESSORS_ONLN), sysconf(_SC_PAGESIZE));
    fprintf(j, "  \"parameters\": {\"runs\": %d, \"quick\": %s, \"board_reps\": %u, "
               "\"file_reps\": %u, \"file_bufsize\": %zu, \"board_data\": ",
            opt.runs, opt.quick ? "true" : "false", opt.board_reps, opt.file_reps,
            opt.file_bufsize);
    json_str(j, opt.data);
    fprintf(j, ", \"board_posts\": %zu, \"board_pages\": %d, \"board_rep_bytes\": %zu, "
               "\"buffer_sizes\": [",
            tgw_board_count(board), BOARD_PAGES, rep_bytes);
    for (size_t i = 0; i < NBUF; i++)
        fprintf(j, "%s%zu", i ? ", " : "", buf_sizes[i]);
    fprintf(j, "], \"file_sizes\": [");
    for (size_t i = 0; i < nfiles; i++)
        fprintf(j, "%s%zu", i ? ", " : "", file_sizes[i]);
    fprintf(j, "]},\n  \"samples\": [");
    int first = 1;
    if (did_board)
        json_samples(j, board_cfg, nboard, "board", opt.board_reps, &first);
    if (did_file)
        json_samples(j, file_cfg, nfilecfg, "file", opt.file_reps, &first);
    fprintf(j, "\n  ],\n  \"summary\": {");
    if (did_board) {
        fprintf(j, "\n    \"board\": [");
        json_summary(j, board_cfg, nboard, 1);
        fprintf(j, "\n    ],\n    \"best_discipline\": {\"discipline\": %d, "
                   "\"bufsize\": %zu, \"median\": %.3f}%s",
                best_board->variant, best_board->size, best_board->med,
                did_file ? "," : "");
    }
    if (did_file) {
        fprintf(j, "\n    \"file\": [");
        json_summary(j, file_cfg, nfilecfg, 0);
        fprintf(j, "\n    ],\n    \"best_file_method\": {\"method\": \"%s\", "
                   "\"sizes_won\": %d}",
                tgw_file_method_name(best_method), method_wins[best_method]);
    }
    fprintf(j, "\n  }\n}\n");
    if (fclose(j))
        die("%s", opt.json);
}

/* ---- main --------------------------------------------------------------- */

static void usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: gwbench [options]\n"
            "  --runs N          runs per configuration (default 5)\n"
            "  --board-reps N    board repetitions (5 pages each) per run (default 2000)\n"
            "  --file-reps N     sends of each file per run (default 1000)\n"
            "  --file-bufsize S  read buffer / splice chunk, e.g. 64K (default 64K)\n"
            "  --big             add 10M files to the file sweep\n"
            "  --only board|file run one of the two sweeps\n"
            "  --data PATH       board data file (default $TGW_BOARD_DATA or the\n"
            "                    compiled-in examples/board-data.txt)\n"
            "  --tmpdir DIR      where the socket and test files go (default $TMPDIR or /tmp)\n"
            "  --json FILE       write every sample, the host and the parameters\n"
            "  --quick           tiny sweep for smoke tests: 3 runs, 20 board reps, 10 file reps\n");
    exit(status);
}

static unsigned parse_count(const char *s, const char *flag)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v == 0 || v > 100000000) {
        fprintf(stderr, "gwbench: %s needs a positive count, not '%s'\n", flag, s);
        exit(2);
    }
    return (unsigned)v;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"runs", required_argument, 0, 'r'},   {"board-reps", required_argument, 0, 'b'},
        {"file-reps", required_argument, 0, 'f'}, {"file-bufsize", required_argument, 0, 's'},
        {"big", no_argument, 0, 'B'},          {"only", required_argument, 0, 'o'},
        {"data", required_argument, 0, 'd'},   {"tmpdir", required_argument, 0, 't'},
        {"json", required_argument, 0, 'j'},   {"quick", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    int set_runs = 0, set_board = 0, set_file = 0, c;
    opt.data = getenv("TGW_BOARD_DATA");
    if (!opt.data || !*opt.data)
        opt.data = TGW_BOARD_DEFAULT;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'r': opt.runs = (int)parse_count(optarg, "--runs"), set_runs = 1; break;
        case 'b': opt.board_reps = parse_count(optarg, "--board-reps"), set_board = 1; break;
        case 'f': opt.file_reps = parse_count(optarg, "--file-reps"), set_file = 1; break;
        case 's':
            if (tgw_parse_size(optarg, &opt.file_bufsize)) {
                fprintf(stderr, "gwbench: bad --file-bufsize '%s'\n", optarg);
                return 2;
            }
            break;
        case 'B': opt.big = 1; break;
        case 'o': opt.only = optarg; break;
        case 'd': opt.data = optarg; break;
        case 't': opt.tmp = optarg; break;
        case 'j': opt.json = optarg; break;
        case 'q': opt.quick = 1; break;
        case 'h': usage(0); break;
        default: usage(2);
        }
    }
    if (optind != argc || (opt.only && strcmp(opt.only, "board") && strcmp(opt.only, "file")))
        usage(2);
    if (opt.quick) { /* explicit counts still win */
        opt.runs = set_runs ? opt.runs : 3;
        opt.board_reps = set_board ? opt.board_reps : 20;
        opt.file_reps = set_file ? opt.file_reps : 10;
    }
    nfiles = opt.big ? 8 : 7;
    int do_board = !opt.only || opt.only[0] == 'b';
    int do_file = !opt.only || opt.only[0] == 'f';
    signal(SIGPIPE, SIG_IGN); /* a dead stub must be an error, not a kill */

    setup();
    struct utsname u;
    uname(&u);
    printf("gwbench: %s %s %s, %ld CPUs; %d runs per configuration, "
           "round-robin\n", u.sysname, u.release, u.machine,
           sysconf(_SC_NPROCESSORS_ONLN), opt.runs);
    fflush(stdout);

    /* One untimed pass of each workload first: page cache, CPU clocks. */
    if (do_board)
        measure(board_work, &board_cfg[0], (unsigned long long)opt.board_reps * rep_bytes);
    if (do_file)
        measure(file_work, &file_cfg[nfiles - 1],
                (unsigned long long)opt.file_reps * file_cfg[nfiles - 1].size);
    int progress = isatty(STDERR_FILENO);
    for (int r = 0; r < opt.runs; r++) {
        if (progress)
            fprintf(stderr, "\rrun %d of %d ...", r + 1, opt.runs);
        for (size_t i = 0; do_board && i < nboard; i++)
            board_cfg[i].s[r] = measure(board_work, &board_cfg[i],
                                        (unsigned long long)opt.board_reps * rep_bytes);
        for (size_t i = 0; do_file && i < nfilecfg; i++)
            file_cfg[i].s[r] = measure(file_work, &file_cfg[i],
                                       (unsigned long long)opt.file_reps * file_cfg[i].size);
    }
    if (progress)
        fprintf(stderr, "\r%20s\r", "");

    if (do_board) {
        summarise(board_cfg, nboard, opt.board_reps);
        report_board();
    }
    if (do_file) {
        summarise(file_cfg, nfilecfg, opt.file_reps);
        report_file();
    }
    if (opt.json)
        write_json(do_board, do_file);
    cleanup();
    return 0;
}
