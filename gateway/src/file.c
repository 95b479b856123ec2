/* File output methods: read/write, mmap/write, sendfile, splice. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tgw_internal.h"

static const char *const method_names[] = {
    [TGW_FILE_READ] = "read",
    [TGW_FILE_MMAP] = "mmap",
    [TGW_FILE_SENDFILE] = "sendfile",
    [TGW_FILE_SPLICE] = "splice",
};

static int valid_method(int m)
{
    return m >= TGW_FILE_READ && m <= TGW_FILE_SPLICE;
}

const char *tgw_file_method_name(enum tgw_file_method m)
{
    return valid_method(m) ? method_names[m] : "invalid";
}

int tgw_file_method_parse(const char *s, enum tgw_file_method *m)
{
    for (int i = TGW_FILE_READ; i <= TGW_FILE_SPLICE; i++)
        if (strcmp(s, method_names[i]) == 0) {
            *m = (enum tgw_file_method)i;
            return 0;
        }
    errno = EINVAL;
    return -1;
}

static size_t min_sz(size_t a, off_t b)
{
    return (off_t)a < b ? a : (size_t)b;
}

/* The file ended before the promised range did. */
static int short_file(void)
{
    errno = EIO;
    return -1;
}

static int send_read(int out, int in, off_t off, off_t len, size_t bufsize)
{
    char *buf = malloc(min_sz(bufsize, len));
    if (!buf)
        return -1;
    int r = 0;
    while (len > 0) {
        ssize_t n = pread(in, buf, min_sz(bufsize, len), off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -1 : short_file();
            break;
        }
        struct iovec iov = {buf, (size_t)n};
        if ((r = tgw__writev_all(out, &iov, 1)))
            break;
        off += n;
        len -= n;
    }
    int e = errno;
    free(buf);
    errno = e;
    return r;
}

static int send_mmap(int out, int in, off_t off, off_t len)
{
    /* Touching a mapping past the end of the file raises SIGBUS, so check
     * the size first (a file truncated concurrently can still do that: the
     * price of this method, which is why it is a choice). */
    struct stat st;
    if (fstat(in, &st))
        return -1;
    if (st.st_size < off + len)
        return short_file();
    off_t page = sysconf(_SC_PAGESIZE);
    off_t start = off - off % page;
    size_t maplen = (size_t)(len + (off - start));
    char *map = mmap(NULL, maplen, PROT_READ, MAP_SHARED, in, start);
    if (map == MAP_FAILED)
        return -1;
    struct iovec iov = {map + (off - start), (size_t)len};
    int r = tgw__writev_all(out, &iov, 1);
    int e = errno;
    munmap(map, maplen);
    errno = e;
    return r;
}

static int send_sendfile(int out, int in, off_t off, off_t len)
{
    while (len > 0) {
        /* sendfile moves at most 0x7ffff000 bytes per call anyway */
        ssize_t n = sendfile(out, in, &off, min_sz(1u << 30, len));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN && !tgw__wait_writable(out))
                continue;
            return -1;
        }
        if (n == 0)
            return short_file();
        len -= n;
    }
    return 0;
}

/* Move exactly len bytes from -> to with splice(), chunk bytes per call.
 * offp is the file offset when from is a file, NULL when it is a pipe. */
static int splice_all(int from, off_t *offp, int to, off_t len, size_t chunk)
{
    while (len > 0) {
        ssize_t n = splice(from, offp, to, NULL, min_sz(chunk, len),
                           SPLICE_F_MOVE | SPLICE_F_MORE);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN && !tgw__wait_writable(to))
                continue;
            return -1;
        }
        if (n == 0)
            return short_file();
        len -= n;
    }
    return 0;
}

static int send_splice(int out, int in, off_t off, off_t len, size_t bufsize)
{
    struct stat st;
    if (fstat(out, &st))
        return -1;
    if (S_ISFIFO(st.st_mode)) /* splice needs a pipe on one side: out is one */
        return splice_all(in, &off, out, len, bufsize);

    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return -1;
    /* Each round fills the empty pipe with at most its capacity, so the
     * file -> pipe step cannot block, then drains it into out. */
    int r = 0, cap = fcntl(p[1], F_GETPIPE_SZ);
    if (cap > 0 && (size_t)cap < bufsize) {
        int grown = fcntl(p[1], F_SETPIPE_SZ, (int)min_sz(bufsize, INT_MAX));
        if (grown > 0) /* growing past pipe-max-size may fail: keep cap */
            cap = grown;
    }
    if (cap <= 0)
        r = -1;
    size_t chunk = cap > 0 && (size_t)cap < bufsize ? (size_t)cap : bufsize;
    while (len > 0 && r == 0) {
        ssize_t n = splice(in, &off, p[1], NULL, min_sz(chunk, len),
                           SPLICE_F_MOVE);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -1 : short_file();
            break;
        }
        r = splice_all(p[0], NULL, out, n, (size_t)n);
        len -= n;
    }
    int e = errno;
    close(p[0]);
    close(p[1]);
    errno = e;
    return r;
}

int tgw_send_fd(tgw_out *o, int in, off_t off, off_t len,
                enum tgw_file_method m, size_t bufsize)
{
    if (in < 0 || off < 0 || len < 0 || !valid_method(m)) {
        errno = EINVAL;
        return -1;
    }
    if (tgw_flush(o)) /* ordering: buffered output goes first */
        return -1;
    if (len == 0) /* nothing to send (and mmap of length 0 is EINVAL) */
        return 0;
    if (bufsize == 0)
        bufsize = BUFSIZ;
    int out = tgw_fd(o), r;
    switch (m) {
    case TGW_FILE_READ:
        r = send_read(out, in, off, len, bufsize);
        break;
    case TGW_FILE_MMAP:
        r = send_mmap(out, in, off, len);
        break;
    case TGW_FILE_SENDFILE:
        r = send_sendfile(out, in, off, len);
        break;
    default:
        r = send_splice(out, in, off, len, bufsize);
        break;
    }
    /* Part of the range may be out already: the stream is no longer
     * trustworthy, exactly as after a failed write. */
    return r ? tgw__fail(o) : 0;
}

int tgw_send_file(tgw_out *o, const char *path, enum tgw_file_method m,
                  size_t bufsize)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    int r = fstat(fd, &st) ? -1 : tgw_send_fd(o, fd, 0, st.st_size, m, bufsize);
    int e = errno;
    close(fd);
    errno = e;
    return r;
}
