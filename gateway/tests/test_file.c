/* File output methods: exact bytes to a pipe and to a regular file, ordering
 * with buffered output, ranges, a file shorter than promised. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tern_gw.h"

static const char head[] = "HTTP-ish head, still buffered\n";
static const char tail[] = "\ntail after the file";

/* Send [off, off+len) of the file at path through method m, between head
 * and tail written with discipline d, to a pipe (to_file = 0) or a regular
 * file; return what arrived in *got and the send's result. */
static int send_one(const char *path, off_t off, off_t len, int to_file,
                    enum tgw_discipline d, enum tgw_file_method m,
                    size_t bufsize, struct buf *got)
{
    char outpath[4200];
    struct capture c = {0};
    int wfd;
    if (to_file) {
        snprintf(outpath, sizeof outpath, "%s/out.bin", t_tmp);
        wfd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    } else {
        capture_start(&c, &wfd);
    }
    int in = open(path, O_RDONLY | O_CLOEXEC);
    tgw_out *out = tgw_open(wfd, d, 4096);
    tgw_puts(out, head);
    int r = tgw_send_fd(out, in, off, len, m, bufsize);
    int e = errno;
    if (r == 0)
        tgw_puts(out, tail);
    tgw_close(out);
    close(in);
    close(wfd);
    if (to_file) {
        t_read_file(outpath, got);
    } else {
        capture_finish(&c);
        *got = c.data;
        free(c.rec);
    }
    errno = e;
    return r;
}

void test_file(void)
{
    static const size_t sizes[] = {0, 1, 4095, 4096, 4097, (1 << 20) + 3};
    static const size_t bufsizes[] = {1000, 65536};
    size_t big = (1 << 20) + 3;
    char *data = malloc(big);
    t_pattern(data, big, 42);

    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        char name[64];
        snprintf(name, sizeof name, "f%zu.bin", sizes[si]);
        char *path = t_write_file(name, data, sizes[si]);
        struct buf want = {0};
        buf_add(&want, head, strlen(head));
        buf_add(&want, data, sizes[si]);
        buf_add(&want, tail, strlen(tail));
        for (int m = TGW_FILE_READ; m <= TGW_FILE_SPLICE; m++)
            for (int to_file = 0; to_file <= 1; to_file++)
                for (size_t bi = 0; bi < 2; bi++) {
                    /* rotate through the disciplines for the head and tail */
                    int d = 1 + (int)((si + (size_t)m + bi) % 6);
                    struct buf got = {0};
                    int r = send_one(path, 0, (off_t)sizes[si], to_file, d, m,
                                     bufsizes[bi], &got);
                    CHECK(r == 0 && buf_eq(&got, &want),
                          "%s size %zu to %s (d%d, buf %zu): r=%d (%s), %zu bytes "
                          "of %zu, first difference at %zu",
                          tgw_file_method_name(m), sizes[si],
                          to_file ? "file" : "pipe", d, bufsizes[bi], r,
                          strerror(errno), got.len, want.len,
                          buf_diff_at(&got, &want));
                    buf_free(&got);
                }
        buf_free(&want);
        if (sizes[si] != big) {
            free(path);
            continue;
        }

        /* A range starting off page boundaries; then a range past the end,
         * which must fail with EIO rather than pretend. */
        for (int m = TGW_FILE_READ; m <= TGW_FILE_SPLICE; m++)
            for (int to_file = 0; to_file <= 1; to_file++) {
                struct buf got = {0}, want = {0};
                buf_add(&want, head, strlen(head));
                buf_add(&want, data + 5001, 300007);
                buf_add(&want, tail, strlen(tail));
                int r = send_one(path, 5001, 300007, to_file, TGW_OWN_OVERFLOW,
                                 m, 4096, &got);
                CHECK(r == 0 && buf_eq(&got, &want),
                      "%s range to %s: r=%d, %zu bytes of %zu",
                      tgw_file_method_name(m), to_file ? "file" : "pipe", r,
                      got.len, want.len);
                buf_free(&got);
                r = send_one(path, 0, (off_t)big + 10, to_file, TGW_OWN_EXACT,
                             m, 65536, &got);
                CHECK(r == -1 && errno == EIO,
                      "%s past the end to %s: r=%d errno %s",
                      tgw_file_method_name(m), to_file ? "file" : "pipe", r,
                      strerror(errno));
                buf_free(&got);
                buf_free(&want);
            }

        /* tgw_send_file opens by path and sends the whole file. */
        struct capture c = {0};
        int wfd;
        capture_start(&c, &wfd);
        tgw_out *out = tgw_open(wfd, TGW_STDIO, 0);
        int r = tgw_send_file(out, path, TGW_FILE_SENDFILE, 0);
        tgw_close(out);
        close(wfd);
        capture_finish(&c);
        CHECK(r == 0 && c.data.len == big && memcmp(c.data.p, data, big) == 0,
              "tgw_send_file: r=%d, %zu bytes", r, c.data.len);
        capture_free(&c);
        free(path);
    }

    tgw_out *out = tgw_open(1, TGW_STDIO, 0);
    CHECK(tgw_send_file(out, "/nonexistent/x", TGW_FILE_MMAP, 0) == -1 &&
              errno == ENOENT, "missing file not reported");
    CHECK(tgw_send_fd(out, 0, 0, 1, (enum tgw_file_method)3, 0) == -1 &&
              errno == EINVAL, "bad method accepted");
    tgw_close(out);
    free(data);
}
