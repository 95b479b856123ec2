/*
 * fcgi-files: a FastCGI responder (libfcgi) that serves the files under a
 * document root, for experiment E2 (mmap against read behind a server).
 *
 *   fcgi-files --root DIR --socket PATH|:PORT [--mode mmap|read]
 *              [--threads N] [--cache N] [--prefix /fs]
 *
 * The file is named by SCRIPT_NAME + PATH_INFO (less --prefix), opened
 * beneath the root only (openat2 RESOLVE_BENEATH; any ".." segment is
 * refused first). Each thread keeps a table of open files (capacity
 * --cache, least recently used replaced) revalidated on every request by
 * size and mtime (and inode, so a replaced file is opened afresh).
 *
 * --mode mmap writes each response straight from a mapping of the whole
 * file; --mode read pread()s it through a 64 KiB buffer. A mapping is never
 * read past the file's size as last seen, and a file truncated while it is
 * being sent raises SIGBUS inside the copy: the handler jumps back out of
 * it, the response is cut short, the entry is dropped, and the server goes
 * on.
 *
 * SIGTERM or SIGINT stops it: no new request is taken, the ones being
 * answered finish (for up to STOP_GRACE seconds), the socket file is
 * removed and it exits 0. (libfcgi's own SIGTERM handler only sets a flag
 * its accept loop never sees while blocked, so the signals are taken by the
 * main thread with sigwait instead.)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <fcgiapp.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum mode { MODE_MMAP, MODE_READ };

struct entry {
    char *path;          /* relative to the root; NULL when free */
    int fd;
    void *map;           /* MODE_MMAP: the whole file (NULL when empty) */
    off_t size;
    struct timespec mtime;
    ino_t ino;
    uint64_t used;       /* tick of the last use, for replacement */
};

struct table {
    struct entry *e;
    size_t cap;
    uint64_t tick;
};

static int root_fd = -1;
static enum mode mode = MODE_MMAP;
static size_t cache_cap = 256;
static const char *prefix = "";
static int listen_sock = -1;
/* Requests being answered, and whether the server is stopping. */
static atomic_int busy;
static atomic_bool stopping;

/* How long a stop waits for the requests being answered. */
#define STOP_GRACE 5

/* The copy a SIGBUS interrupts: where to jump back to, per thread. */
static __thread sigjmp_buf *bus_jump;

static void on_sigbus(int sig)
{
    (void)sig;
    if (bus_jump != NULL)
        siglongjmp(*bus_jump, 1);
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

static void drop(struct entry *e)
{
    if (e->map != NULL)
        munmap(e->map, (size_t)e->size);
    if (e->fd >= 0)
        close(e->fd);
    free(e->path);
    memset(e, 0, sizeof *e);
    e->fd = -1;
}

/* Opens `rel` beneath the root: never through "..", never out by a symlink. */
static int open_beneath(const char *rel)
{
    struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW, .resolve = RESOLVE_BENEATH };
    return (int)syscall(SYS_openat2, root_fd, rel, &how, sizeof how);
}

static int same(const struct entry *e, const struct stat *st)
{
    return e->size == st->st_size && e->ino == st->st_ino && e->mtime.tv_sec == st->st_mtim.tv_sec &&
           e->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* The table's entry for `rel`, opened or revalidated; NULL with errno. */
static struct entry *lookup(struct table *t, const char *rel)
{
    struct entry *e = NULL, *victim = &t->e[0];
    for (size_t i = 0; i < t->cap; i++) {
        if (t->e[i].path != NULL && strcmp(t->e[i].path, rel) == 0) {
            e = &t->e[i];
            break;
        }
        if (t->e[i].used < victim->used)
            victim = &t->e[i];
    }
    t->tick++;
    if (e != NULL) {
        /* Revalidate by the name: a replaced or changed file is reopened. */
        struct stat st;
        if (fstatat(root_fd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && same(e, &st)) {
            e->used = t->tick;
            return e;
        }
        drop(e);
        victim = e;
    }
    int fd = open_beneath(rel);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EACCES;
        return NULL;
    }
    void *map = NULL;
    if (mode == MODE_MMAP && st.st_size > 0) {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            close(fd);
            return NULL;
        }
    }
    drop(victim);
    victim->path = strdup(rel);
    victim->fd = fd;
    victim->map = map;
    victim->size = st.st_size;
    victim->mtime = st.st_mtim;
    victim->ino = st.st_ino;
    victim->used = t->tick;
    return victim;
}

static const char *content_type(const char *path)
{
    static const char *types[][2] = {
        { ".html", "text/html" }, { ".txt", "text/plain" }, { ".css", "text/css" },
        { ".js", "application/javascript" }, { ".png", "image/png" }, { ".jpg", "image/jpeg" },
    };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot != NULL && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i][0]) == 0)
            return types[i][1];
    return "application/octet-stream";
}

static void status(FCGX_Stream *out, int code, const char *text)
{
    FCGX_FPrintF(out, "Status: %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s\n", code, text,
                 (int)strlen(text) + 1, text);
}

/* The relative path a request names, or NULL when it must be refused. */
static const char *relative(FCGX_Request *r, char *buf, size_t len)
{
    const char *script = FCGX_GetParam("SCRIPT_NAME", r->envp);
    const char *info = FCGX_GetParam("PATH_INFO", r->envp);
    int n = snprintf(buf, len, "%s%s", script ? script : "", info ? info : "");
    if (n <= 0 || (size_t)n >= len)
        return NULL;
    size_t plen = strlen(prefix);
    if (strncmp(buf, prefix, plen) != 0)
        return NULL;
    const char *rel = buf + plen;
    while (*rel == '/')
        rel++;
    /* Any ".." segment is refused before the file system is asked. */
    for (const char *s = rel; *s;) {
        size_t seg = strcspn(s, "/");
        if (seg == 2 && s[0] == '.' && s[1] == '.')
            return NULL;
        s += seg + (s[seg] == '/');
    }
    return *rel ? rel : NULL;
}

/* Sends the file's bytes; returns 0, or -1 when it shrank under us. */
static int send_body(FCGX_Stream *out, struct entry *e, char *buf, size_t buflen)
{
    if (mode == MODE_READ) {
        for (off_t off = 0; off < e->size;) {
            ssize_t n = pread(e->fd, buf, buflen, off);
            if (n <= 0)
                return -1;
            if (FCGX_PutStr(buf, (int)n, out) < 0)
                return 0;
            off += n;
        }
        return 0;
    }
    sigjmp_buf jump;
    volatile off_t off = 0;
    if (sigsetjmp(jump, 1) != 0) {
        bus_jump = NULL;
        return -1;
    }
    bus_jump = &jump;
    const size_t piece = 256 * 1024;
    while (off < e->size) {
        size_t n = (size_t)(e->size - off) < piece ? (size_t)(e->size - off) : piece;
        if (FCGX_PutStr((const char *)e->map + off, (int)n, out) < 0)
            break;
        off += (off_t)n;
    }
    bus_jump = NULL;
    return 0;
}

static void serve(FCGX_Request *r, struct table *t, char *buf, size_t buflen)
{
    char path[4096];
    const char *method = FCGX_GetParam("REQUEST_METHOD", r->envp);
    int head = method != NULL && strcmp(method, "HEAD") == 0;
    if (method == NULL || (!head && strcmp(method, "GET") != 0))
        return status(r->out, 405, "method not allowed");
    const char *rel = relative(r, path, sizeof path);
    if (rel == NULL)
        return status(r->out, 403, "forbidden");
    struct entry *e = lookup(t, rel);
    if (e == NULL)
        return status(r->out, errno == ENOENT || errno == ENOTDIR ? 404 : 403,
                      errno == ENOENT || errno == ENOTDIR ? "not found" : "forbidden");
    FCGX_FPrintF(r->out, "Content-Type: %s\r\nContent-Length: %lld\r\n\r\n", content_type(rel), (long long)e->size);
    if (!head && send_body(r->out, e, buf, buflen) != 0) {
        fprintf(stderr, "fcgi-files: %s changed while it was sent; response cut\n", rel);
        drop(e);
    }
}

static void *worker(void *arg)
{
    (void)arg;
    struct table t = { .e = calloc(cache_cap, sizeof(struct entry)), .cap = cache_cap };
    size_t buflen = 64 * 1024;
    char *buf = malloc(buflen);
    if (t.e == NULL || buf == NULL) {
        perror("fcgi-files: malloc");
        exit(1);
    }
    for (size_t i = 0; i < t.cap; i++)
        t.e[i].fd = -1;
    FCGX_Request r;
    FCGX_InitRequest(&r, listen_sock, 0);
    while (FCGX_Accept_r(&r) >= 0) {
        atomic_fetch_add(&busy, 1);
        /* A request accepted as the stop began is still answered. */
        serve(&r, &t, buf, buflen);
        FCGX_Finish_r(&r);
        atomic_fetch_sub(&busy, 1);
        if (atomic_load(&stopping))
            break;
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: fcgi-files --root DIR --socket PATH|:PORT [--mode mmap|read] [--threads N] "
                    "[--cache N] [--prefix /fs]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *root = NULL, *sock = NULL;
    int threads = 4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            usage();
        if (strcmp(a, "--root") == 0)
            root = v;
        else if (strcmp(a, "--socket") == 0)
            sock = v;
        else if (strcmp(a, "--mode") == 0 && strcmp(v, "mmap") == 0)
            mode = MODE_MMAP;
        else if (strcmp(a, "--mode") == 0 && strcmp(v, "read") == 0)
            mode = MODE_READ;
        else if (strcmp(a, "--threads") == 0 && atoi(v) > 0)
            threads = atoi(v);
        else if (strcmp(a, "--cache") == 0 && atoi(v) > 0)
            cache_cap = (size_t)atoi(v);
        else if (strcmp(a, "--prefix") == 0)
            prefix = v;
        else
            usage();
        i++;
    }
    if (root == NULL || sock == NULL)
        usage();
    root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        perror(root);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Blocked before any thread starts, so only sigwait below takes them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    struct sigaction sa = { .sa_handler = on_sigbus, .sa_flags = SA_NODEFER };
    sigaction(SIGBUS, &sa, NULL);
    if (FCGX_Init() != 0 || (listen_sock = FCGX_OpenSocket(sock, 128)) < 0) {
        fprintf(stderr, "fcgi-files: cannot listen on %s\n", sock);
        return 1;
    }
    fprintf(stderr, "fcgi-files: serving %s on %s (mode %s, %d threads)\n", root, sock,
            mode == MODE_MMAP ? "mmap" : "read", threads);
    for (int i = 0; i < threads; i++) {
        pthread_t id;
        if (pthread_create(&id, NULL, worker, NULL) != 0) {
            perror("fcgi-files: pthread_create");
            return 1;
        }
        pthread_detach(id);
    }
    int sig;
    sigwait(&stop, &sig);
    atomic_store(&stopping, 1);
    /* Wakes the threads blocked in accept (EINVAL) and refuses new
     * connections; threads on a kept-alive connection are ended by exit. */
    shutdown(listen_sock, SHUT_RDWR);
    if (sock[0] != ':')
        unlink(sock);
    struct timespec tick = { .tv_nsec = 10 * 1000 * 1000 };
    for (int i = 0; i < STOP_GRACE * 100 && atomic_load(&busy) > 0; i++)
        nanosleep(&tick, NULL);
    fprintf(stderr, "fcgi-files: stopped by signal %d\n", sig);
    return 0;
}
