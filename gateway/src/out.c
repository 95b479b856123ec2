/* Output disciplines: {heap | mmap buffer} x {stdio | exact | overflow}. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tgw_internal.h"

enum placement { PLACE_HEAP, PLACE_MMAP };
enum policy { POL_STDIO, POL_EXACT, POL_OVERFLOW };

static const struct {
    enum placement place;
    enum policy pol;
    const char *name;
} disc[] = {
    [TGW_STDIO] = {PLACE_HEAP, POL_STDIO, "stdio"},
    [TGW_STDIO_MMAP] = {PLACE_MMAP, POL_STDIO, "stdio-mmap"},
    [TGW_OWN_EXACT] = {PLACE_HEAP, POL_EXACT, "exact"},
    [TGW_OWN_OVERFLOW] = {PLACE_HEAP, POL_OVERFLOW, "overflow"},
    [TGW_OWN_EXACT_MMAP] = {PLACE_MMAP, POL_EXACT, "exact-mmap"},
    [TGW_OWN_OVERFLOW_MMAP] = {PLACE_MMAP, POL_OVERFLOW, "overflow-mmap"},
};

struct tgw_out {
    int fd;
    enum tgw_discipline d;
    enum placement place;
    enum policy pol;
    char *buf;  /* the buffer: ours, or lent to stdio with setvbuf */
    size_t cap; /* its size in bytes */
    size_t len; /* bytes pending in it (own-buffer policies only) */
    FILE *fp;   /* stdio policy only */
    int err;    /* sticky errno once a write failed, else 0 */
};

static int valid_discipline(int d)
{
    return d >= TGW_STDIO && d <= TGW_OWN_OVERFLOW_MMAP;
}

const char *tgw_discipline_name(enum tgw_discipline d)
{
    return valid_discipline(d) ? disc[d].name : "invalid";
}

int tgw__fail(tgw_out *o)
{
    if (!o->err)
        o->err = errno ? errno : EIO;
    errno = o->err;
    return -1;
}

/* glibc's own file write path treats EINTR as a hard error and drops the
 * buffered bytes, so the stdio disciplines get a FILE whose sink is our
 * resuming write loop.  The buffering being measured is still glibc's. */
static ssize_t cookie_write(void *cookie, const char *buf, size_t n)
{
    tgw_out *o = cookie;
    struct iovec iov = {(void *)buf, n};
    return tgw__writev_all(o->fd, &iov, 1) ? -1 : (ssize_t)n;
}

static void free_buf(tgw_out *o)
{
    if (!o->buf)
        return;
    if (o->place == PLACE_MMAP)
        munmap(o->buf, o->cap);
    else
        free(o->buf);
}

tgw_out *tgw_open(int fd, enum tgw_discipline d, size_t bufsize)
{
    if (fd < 0 || !valid_discipline(d)) {
        errno = EINVAL;
        return NULL;
    }
    tgw_out *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->fd = fd;
    o->d = d;
    o->place = disc[d].place;
    o->pol = disc[d].pol;
    o->cap = bufsize ? bufsize : BUFSIZ;
    if (o->place == PLACE_MMAP) {
        void *p = mmap(NULL, o->cap, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        o->buf = p == MAP_FAILED ? NULL : p;
    } else {
        o->buf = malloc(o->cap);
    }
    if (!o->buf)
        goto fail;
    if (o->pol == POL_STDIO) {
        cookie_io_functions_t io = {.write = cookie_write};
        o->fp = fopencookie(o, "w", io);
        if (!o->fp)
            goto fail;
        if (setvbuf(o->fp, o->buf, _IOFBF, o->cap) != 0) {
            fclose(o->fp);
            errno = EINVAL;
            goto fail;
        }
    }
    return o;
fail:;
    int e = errno;
    free_buf(o);
    free(o);
    errno = e;
    return NULL;
}

tgw_out *tgw_open_env(int fd)
{
    enum tgw_discipline d = TGW_STDIO;
    size_t size = TGW_DEFAULT_ENV_BUFSIZE;
    const char *s = getenv("TGW_DISCIPLINE");
    if (s && *s) {
        if (!(s[0] >= '1' && s[0] <= '6' && s[1] == '\0')) {
            errno = EINVAL;
            return NULL;
        }
        d = (enum tgw_discipline)(s[0] - '0');
    }
    s = getenv("TGW_BUFSIZE");
    if (s && *s && tgw_parse_size(s, &size))
        return NULL;
    return tgw_open(fd, d, size);
}

int tgw_parse_size(const char *s, size_t *out)
{
    size_t v = 0;
    const char *p = s;
    if (*p < '0' || *p > '9')
        goto bad;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (SIZE_MAX - 9) / 10)
            goto bad;
        v = v * 10 + (size_t)(*p - '0');
    }
    size_t mult = 1;
    if (*p == 'k' || *p == 'K')
        mult = 1024, p++;
    else if (*p == 'm' || *p == 'M')
        mult = 1024 * 1024, p++;
    if (*p != '\0' || v == 0 || v > SIZE_MAX / mult)
        goto bad;
    *out = v * mult;
    return 0;
bad:
    errno = EINVAL;
    return -1;
}

/* Write out the pending bytes of an own buffer in one write(). */
static int own_flush(tgw_out *o)
{
    struct iovec iov = {o->buf, o->len};
    o->len = 0;
    return tgw__writev_all(o->fd, &iov, 1);
}

static int own_write(tgw_out *o, const char *p, size_t n)
{
    if (o->pol == POL_OVERFLOW) {
        if (n <= o->cap - o->len) {
            memcpy(o->buf + o->len, p, n);
            o->len += n;
            return 0;
        }
        /* Buffer + overflow in one system call.  writev rather than copying
         * into a bigger buffer: the kernel gathers both pieces itself, so
         * the overflow (which may be far larger than the buffer) is never
         * copied in user space and the buffer never has to grow. */
        struct iovec iov[2] = {{o->buf, o->len}, {(void *)p, n}};
        o->len = 0;
        return tgw__writev_all(o->fd, iov, 2);
    }
    /* POL_EXACT: fill, and every time the buffer is full with bytes still
     * to go, write exactly one buffer.  A full buffer with nothing left over
     * waits for the next write or flush. */
    for (;;) {
        size_t k = o->cap - o->len;
        if (k > n)
            k = n;
        memcpy(o->buf + o->len, p, k);
        o->len += k;
        p += k;
        n -= k;
        if (n == 0)
            return 0;
        if (own_flush(o))
            return -1;
    }
}

int tgw_write(tgw_out *o, const void *buf, size_t len)
{
    if (o->err) {
        errno = o->err;
        return -1;
    }
    if (len == 0)
        return 0;
    if (o->pol == POL_STDIO)
        return fwrite(buf, 1, len, o->fp) == len ? 0 : tgw__fail(o);
    return own_write(o, buf, len) ? tgw__fail(o) : 0;
}

int tgw_puts(tgw_out *o, const char *s)
{
    if (o->pol == POL_STDIO && !o->err)
        return fputs(s, o->fp) >= 0 ? 0 : tgw__fail(o);
    return tgw_write(o, s, strlen(s));
}

int tgw_vprintf(tgw_out *o, const char *fmt, va_list ap)
{
    if (o->err) {
        errno = o->err;
        return -1;
    }
    if (o->pol == POL_STDIO) {
        int r = vfprintf(o->fp, fmt, ap);
        return r >= 0 ? r : tgw__fail(o);
    }
    /* Format straight into the buffer when it fits (the common case: no
     * extra copy); otherwise format into a temporary and write that. */
    va_list again;
    va_copy(again, ap);
    size_t room = o->cap - o->len;
    int n = vsnprintf(o->buf + o->len, room, fmt, ap);
    if (n >= 0 && (size_t)n < room) { /* < : vsnprintf also needs the NUL */
        o->len += (size_t)n;
        va_end(again);
        return n;
    }
    if (n < 0) {
        va_end(again);
        return tgw__fail(o);
    }
    char small[1024];
    char *tmp = (size_t)n < sizeof small ? small : malloc((size_t)n + 1);
    if (!tmp) {
        va_end(again);
        return tgw__fail(o);
    }
    vsnprintf(tmp, (size_t)n + 1, fmt, again);
    va_end(again);
    int r = own_write(o, tmp, (size_t)n);
    if (tmp != small)
        free(tmp);
    return r ? tgw__fail(o) : n;
}

int tgw_printf(tgw_out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = tgw_vprintf(o, fmt, ap);
    va_end(ap);
    return r;
}

int tgw_flush(tgw_out *o)
{
    if (o->err) {
        errno = o->err;
        return -1;
    }
    if (o->pol == POL_STDIO)
        return fflush(o->fp) == 0 ? 0 : tgw__fail(o);
    return o->len && own_flush(o) ? tgw__fail(o) : 0;
}

int tgw_close(tgw_out *o)
{
    int r = tgw_flush(o);
    int e = errno;
    if (o->fp) {
        /* After a failure, drop what stdio still holds: fclose must not
         * send stale bytes after the error was reported. */
        if (r)
            __fpurge(o->fp);
        if (fclose(o->fp) != 0 && r == 0)
            r = -1, e = errno;
    }
    free_buf(o);
    free(o);
    errno = e;
    return r;
}

int tgw_fd(const tgw_out *o) { return o->fd; }
enum tgw_discipline tgw_discipline_of(const tgw_out *o) { return o->d; }
size_t tgw_bufsize(const tgw_out *o) { return o->cap; }
