/* Output disciplines: byte-identical to plain stdio, flush policies, EINTR,
 * errors. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"
#include "tern_gw.h"

#define PAT (1u << 20)
static char bin[PAT];  /* binary bytes (NULs included) for writes */
static char text[PAT]; /* printable text for puts and printf */

enum op_kind { OP_WRITE, OP_PUTS, OP_PRINTF, OP_FLUSH };
struct op {
    enum op_kind k;
    size_t off, len; /* slice of bin/text; for printf len is the %.*s part */
    int num, width;  /* printf only */
};

#define NOPS 150
#define PRINTF_FMT "<%d|%.*s|%-*s|%08x>\n"

static size_t clamp(size_t n, size_t max) { return n < max ? n : max; }

/* A deterministic mix of calls sized relative to the buffer: many tiny
 * writes, writes of exactly the buffer size, writes larger than it, long
 * printf output, and (if flushes) explicit flushes in between. */
static void gen_ops(struct op *ops, size_t B, unsigned seed, int flushes,
                    size_t maxw)
{
    unsigned long long s = 0x9e3779b97f4a7c15ull * (seed + 1) + B;
    for (size_t i = 0; i < NOPS; i++) {
        struct op *o = &ops[i];
        unsigned r = (unsigned)(t_rand(&s) % 100);
        size_t x = (size_t)t_rand(&s);
        *o = (struct op){.k = OP_WRITE};
        if (r < 35)
            o->len = 1 + x % 8;
        else if (r < 40)
            o->len = 0;
        else if (r < 50)
            o->len = B;
        else if (r < 58)
            o->len = B * (1 + x % 3) + (x >> 8) % B;
        else if (r < 68)
            o->len = 1 + x % 3000;
        else if (r < 78)
            o->k = OP_PUTS, o->len = x % 301;
        else if (r < 90) {
            o->k = OP_PRINTF;
            o->len = x % 201;
            o->num = (int)(x >> 16);
            o->width = (int)clamp((x >> 8) % (2 * B + 100), 70000);
        } else if (r < 95)
            o->k = flushes ? OP_FLUSH : OP_WRITE, o->len = 1;
        else
            o->len = 1 + x % 100000;
        o->len = clamp(o->len, maxw);
        o->off = (size_t)t_rand(&s) % (PAT - o->len);
    }
}

/* Bytes an op produces (the flush-policy model needs it). */
static size_t op_bytes(const struct op *o)
{
    switch (o->k) {
    case OP_PRINTF:
        return (size_t)snprintf(NULL, 0, PRINTF_FMT, o->num, (int)o->len,
                                text + o->off, o->width, "w", (unsigned)o->num);
    case OP_FLUSH:
        return 0;
    default:
        return o->len;
    }
}

static void puts_arg(char *dst, const struct op *o)
{
    memcpy(dst, text + o->off, o->len);
    dst[o->len] = '\0';
}

static void apply_stdio(FILE *f, const struct op *ops)
{
    char s[302];
    for (size_t i = 0; i < NOPS; i++) {
        const struct op *o = &ops[i];
        switch (o->k) {
        case OP_WRITE:
            fwrite(bin + o->off, 1, o->len, f);
            break;
        case OP_PUTS:
            puts_arg(s, o);
            fputs(s, f);
            break;
        case OP_PRINTF:
            fprintf(f, PRINTF_FMT, o->num, (int)o->len, text + o->off,
                    o->width, "w", (unsigned)o->num);
            break;
        case OP_FLUSH:
            fflush(f);
            break;
        }
    }
}

/* Returns the number of calls that reported failure or a wrong count. */
static int apply_tgw(tgw_out *out, const struct op *ops)
{
    char s[302];
    int bad = 0;
    for (size_t i = 0; i < NOPS; i++) {
        const struct op *o = &ops[i];
        switch (o->k) {
        case OP_WRITE:
            bad += tgw_write(out, bin + o->off, o->len) != 0;
            break;
        case OP_PUTS:
            puts_arg(s, o);
            bad += tgw_puts(out, s) != 0;
            break;
        case OP_PRINTF:
            bad += (size_t)tgw_printf(out, PRINTF_FMT, o->num, (int)o->len,
                                      text + o->off, o->width, "w",
                                      (unsigned)o->num) != op_bytes(o);
            break;
        case OP_FLUSH:
            bad += tgw_flush(out) != 0;
            break;
        }
    }
    return bad;
}

static void reference(const struct op *ops, struct buf *ref)
{
    struct capture c = {0};
    int wfd;
    capture_start(&c, &wfd);
    FILE *f = fdopen(wfd, "w");
    apply_stdio(f, ops);
    fclose(f);
    capture_finish(&c);
    *ref = c.data;
    free(c.rec);
}

/* Run ops through discipline d with buffer B into capture c (a pipe, or a
 * SOCK_SEQPACKET socket when records is set). */
static void run_tgw(const struct op *ops, enum tgw_discipline d, size_t B,
                    struct capture *c, int slow, int records)
{
    int wfd;
    c->slow = slow;
    if (records)
        capture_start_records(c, &wfd);
    else
        capture_start(c, &wfd);
    tgw_out *out = tgw_open(wfd, d, B);
    if (!CHECK(out, "tgw_open(%d, %zu): %s", d, B, strerror(errno))) {
        close(wfd);
        capture_finish(c);
        return;
    }
    int bad = apply_tgw(out, ops);
    CHECK(bad == 0, "d%d B=%zu: %d calls failed (%s)", d, B, bad, strerror(errno));
    CHECK(tgw_close(out) == 0, "d%d B=%zu: close: %s", d, B, strerror(errno));
    close(wfd);
    capture_finish(c);
}

static void compare(const char *what, enum tgw_discipline d, size_t B,
                    unsigned seed, const struct buf *got, const struct buf *ref)
{
    CHECK(buf_eq(got, ref),
          "%s: discipline %d bufsize %zu seed %u: %zu bytes vs stdio %zu, "
          "first difference at %zu",
          what, d, B, seed, got->len, ref->len, buf_diff_at(got, ref));
}

static const size_t sizes[] = {1, 2, 3, 7, 64, 1000, 1024, 4096, 16384, 65536};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void test_identical(void)
{
    static struct op ops[NOPS];
    for (size_t si = 0; si < NSIZES; si++)
        for (unsigned seed = 1; seed <= 3; seed++) {
            size_t B = sizes[si];
            gen_ops(ops, B, seed, 1, PAT - 1);
            struct buf ref;
            reference(ops, &ref);
            for (int d = TGW_STDIO; d <= TGW_OWN_OVERFLOW_MMAP; d++) {
                struct capture c = {0};
                run_tgw(ops, d, B, &c, 0, 0);
                compare("identical", d, B, seed, &c.data, &ref);
                capture_free(&c);
            }
            buf_free(&ref);
        }
}

/* The own-buffer policies, seen through SOCK_SEQPACKET where every write()
 * is one record: exact writes only whole buffers (the last one may be
 * partial); overflow writes buffer+overflow as one record.  The expected
 * records come from a model of the policy. */
static size_t model(const struct op *ops, int exact, size_t B, size_t *rec)
{
    size_t n = 0, len = 0;
    for (size_t i = 0; i < NOPS; i++) {
        size_t k = op_bytes(&ops[i]);
        if (exact) {
            for (; len + k > B; k -= B - len, len = 0)
                rec[n++] = B;
            len += k;
        } else if (len + k > B) {
            rec[n++] = len + k, len = 0;
        } else {
            len += k;
        }
    }
    if (len)
        rec[n++] = len;
    return n;
}

static void test_policy_records(void)
{
    static const size_t bs[] = {1, 7, 64, 1000, 4096};
    static struct op ops[NOPS];
    for (size_t bi = 0; bi < sizeof bs / sizeof bs[0]; bi++) {
        size_t B = bs[bi];
        gen_ops(ops, B, 7, 0, 60000);
        struct buf ref;
        reference(ops, &ref);
        for (int d = TGW_OWN_EXACT; d <= TGW_OWN_OVERFLOW_MMAP; d++) {
            int exact = d == TGW_OWN_EXACT || d == TGW_OWN_EXACT_MMAP;
            size_t *want = malloc((ref.len + NOPS + 1) * sizeof *want);
            size_t nwant = model(ops, exact, B, want);
            struct capture c = {0};
            run_tgw(ops, d, B, &c, 0, 1);
            compare("records", d, B, 7, &c.data, &ref);
            size_t i = 0;
            while (i < nwant && i < c.nrec && want[i] == c.rec[i])
                i++;
            CHECK(c.nrec == nwant && i == nwant,
                  "records: discipline %d bufsize %zu: %zu write()s, model %zu;"
                  " record %zu is %zu bytes, model %zu",
                  d, B, c.nrec, nwant, i, i < c.nrec ? c.rec[i] : 0,
                  i < nwant ? want[i] : 0);
            free(want);
            capture_free(&c);
        }
        buf_free(&ref);
    }
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig)
{
    (void)sig;
    alarms++;
}

/* A timer signal without SA_RESTART keeps interrupting writes blocked on a
 * full pipe (EINTR, or a short write when part went through).  Plain glibc
 * stdio loses bytes here; every discipline must not. */
static void test_eintr(void)
{
    struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART */
    struct sigaction old;
    sigaction(SIGALRM, &sa, &old);
    static struct op ops[NOPS];
    static const size_t bs[] = {1000, 65536};
    for (size_t bi = 0; bi < 2; bi++) {
        size_t B = bs[bi];
        gen_ops(ops, B, 11, 1, PAT - 1);
        struct buf ref;
        reference(ops, &ref);
        for (int d = TGW_STDIO; d <= TGW_OWN_OVERFLOW_MMAP; d++) {
            /* The reader thread inherits a blocked SIGALRM, so the signal
             * always lands on the writing thread. */
            sigset_t set, prev;
            sigemptyset(&set);
            sigaddset(&set, SIGALRM);
            pthread_sigmask(SIG_BLOCK, &set, &prev);
            struct capture c = {0};
            int wfd;
            c.slow = 1;
            capture_start(&c, &wfd);
            pthread_sigmask(SIG_SETMASK, &prev, NULL);
            alarms = 0;
            struct itimerval it = {{0, 300}, {0, 300}};
            setitimer(ITIMER_REAL, &it, NULL);
            tgw_out *out = tgw_open(wfd, d, B);
            int bad = apply_tgw(out, ops);
            int closed = tgw_close(out);
            setitimer(ITIMER_REAL, &(struct itimerval){0}, NULL);
            close(wfd);
            capture_finish(&c);
            CHECK(bad == 0 && closed == 0, "eintr d%d B=%zu: %d calls failed: %s",
                  d, B, bad, strerror(errno));
            CHECK(alarms > 0, "eintr d%d B=%zu: no signal arrived", d, B);
            compare("eintr", d, B, 11, &c.data, &ref);
            capture_free(&c);
        }
        buf_free(&ref);
    }
    sigaction(SIGALRM, &old, NULL);
}

/* A write error (reader gone: EPIPE) is reported and stays reported. */
static void test_errors(void)
{
    for (int d = TGW_STDIO; d <= TGW_OWN_OVERFLOW_MMAP; d++) {
        int p[2];
        if (pipe(p))
            abort();
        close(p[0]);
        tgw_out *out = tgw_open(p[1], d, 64);
        int r = tgw_write(out, bin, 200); /* more than the buffer: must write */
        CHECK(r == -1 && errno == EPIPE, "d%d: write to closed pipe: %d %s", d,
              r, strerror(errno));
        errno = 0;
        CHECK(tgw_puts(out, "x") == -1 && errno == EPIPE, "d%d: error not sticky", d);
        CHECK(tgw_printf(out, "%d", 1) == -1, "d%d: printf after error", d);
        CHECK(tgw_flush(out) == -1, "d%d: flush after error", d);
        CHECK(tgw_close(out) == -1 && errno == EPIPE, "d%d: close after error", d);
        close(p[1]);
    }
    errno = 0;
    CHECK(!tgw_open(1, 0, 64) && errno == EINVAL, "discipline 0 accepted");
    CHECK(!tgw_open(1, 7, 64) && errno == EINVAL, "discipline 7 accepted");
    CHECK(!tgw_open(-1, TGW_STDIO, 64) && errno == EINVAL, "fd -1 accepted");

    tgw_out *out = tgw_open(1, TGW_OWN_EXACT, 0);
    CHECK(out && tgw_bufsize(out) == BUFSIZ, "bufsize 0 is not BUFSIZ");
    tgw_close(out);
}

static void test_parse(void)
{
    static const struct {
        const char *s;
        size_t v; /* 0: must be rejected */
    } cases[] = {{"1", 1},         {"16384", 16384}, {"16K", 16384},
                 {"64k", 65536},   {"1M", 1 << 20},  {"0", 0},
                 {"", 0},          {"12x", 0},       {"K", 0},
                 {"-1", 0},        {"99999999999999999999", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t v = 0;
        int r = tgw_parse_size(cases[i].s, &v);
        CHECK(cases[i].v ? r == 0 && v == cases[i].v : r == -1,
              "tgw_parse_size(\"%s\") = %d, %zu", cases[i].s, r, v);
    }

    setenv("TGW_DISCIPLINE", "5", 1);
    setenv("TGW_BUFSIZE", "2K", 1);
    tgw_out *out = tgw_open_env(1);
    CHECK(out && tgw_discipline_of(out) == TGW_OWN_EXACT_MMAP &&
              tgw_bufsize(out) == 2048, "tgw_open_env 5/2K");
    if (out)
        tgw_close(out);
    setenv("TGW_DISCIPLINE", "7", 1);
    CHECK(!tgw_open_env(1) && errno == EINVAL, "TGW_DISCIPLINE=7 accepted");
    setenv("TGW_DISCIPLINE", "1", 1);
    setenv("TGW_BUFSIZE", "lots", 1);
    CHECK(!tgw_open_env(1) && errno == EINVAL, "TGW_BUFSIZE=lots accepted");
    unsetenv("TGW_DISCIPLINE");
    unsetenv("TGW_BUFSIZE");
    out = tgw_open_env(1);
    CHECK(out && tgw_discipline_of(out) == TGW_STDIO &&
              tgw_bufsize(out) == TGW_DEFAULT_ENV_BUFSIZE, "tgw_open_env defaults");
    if (out)
        tgw_close(out);

    CHECK(strcmp(tgw_discipline_name(TGW_OWN_OVERFLOW), "overflow") == 0,
          "discipline name");
    enum tgw_file_method m;
    CHECK(tgw_file_method_parse("splice", &m) == 0 && m == TGW_FILE_SPLICE &&
              strcmp(tgw_file_method_name(m), "splice") == 0,
          "file method names");
    CHECK(tgw_file_method_parse("mmapx", &m) == -1, "bad method accepted");
}

void test_output(void)
{
    t_pattern(bin, PAT, 1);
    for (size_t i = 0; i < PAT; i++)
        text[i] = i % 61 == 60 ? '\n' : (char)('a' + (i * 7 + i / 61) % 26);
    test_identical();
    test_policy_records();
    test_eintr();
    test_errors();
    test_parse();
}
