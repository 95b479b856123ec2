/* The bulletin-board query interface: connect, count, get line n, release. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tern_gw.h"

struct tgw_board {
    char *data;           /* the whole file, read once at connect */
    size_t count;         /* number of lines */
    struct tgw_str *line; /* line[i] = line i+1, without newline or CR */
};

/* Read the whole file into memory.  The file is copied, not mapped, so a
 * writer truncating it later cannot make the reader fault. */
static char *slurp(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 0, len = 0;
    char *buf = NULL;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 64 * 1024;
            char *bigger = realloc(buf, cap);
            if (!bigger)
                goto fail;
            buf = bigger;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto fail;
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    *size = len;
    return buf;
fail:;
    int e = errno;
    free(buf);
    close(fd);
    errno = e;
    return NULL;
}

tgw_board *tgw_board_connect(const char *path)
{
    tgw_board *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    size_t size;
    if (!(b->data = slurp(path, &size)))
        goto fail;
    size_t lines = 0;
    for (const char *p = b->data; (p = memchr(p, '\n', size - (size_t)(p - b->data))); p++)
        lines++;
    if (size && b->data[size - 1] != '\n')
        lines++; /* a last line without its newline still counts */
    if (!(b->line = malloc((lines ? lines : 1) * sizeof *b->line)))
        goto fail;
    const char *p = b->data, *end = b->data + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        struct tgw_str *l = &b->line[b->count++];
        l->p = p;
        l->n = (size_t)(e - p);
        if (l->n && p[l->n - 1] == '\r')
            l->n--;
        p = e + 1;
    }
    return b;
fail:;
    int e = errno;
    tgw_board_release(b);
    errno = e;
    return NULL;
}

size_t tgw_board_count(const tgw_board *b) { return b->count; }

int tgw_board_get(const tgw_board *b, size_t n, struct tgw_post *post)
{
    if (n == 0 || n > b->count) {
        errno = ERANGE;
        return -1;
    }
    struct tgw_str rest = post->line = b->line[n - 1];
    struct tgw_str *field[] = {&post->author, &post->date, &post->subject};
    for (size_t i = 0; i < 3; i++) {
        const char *tab = memchr(rest.p, '\t', rest.n);
        size_t k = tab ? (size_t)(tab - rest.p) : rest.n;
        *field[i] = (struct tgw_str){rest.p, k};
        rest.p += tab ? k + 1 : k;
        rest.n -= tab ? k + 1 : k;
    }
    post->body = rest;
    return 0;
}

void tgw_board_release(tgw_board *b)
{
    if (!b)
        return;
    free(b->line);
    free(b->data);
    free(b);
}
