/*
 * download.cgi — send a file from a configured directory.
 *   TGW_DOWNLOAD_ROOT   the directory files are served from (default: the
 *                       directory `files` beside the program's own, as in the
 *                       demo site: cgi-bin/download.cgi serves files/)
 *   PATH_INFO           /NAME, or else QUERY_STRING file=NAME (URL-encoded)
 *   TGW_FILE_METHOD     read | mmap | sendfile | splice   (default mmap)
 *   TGW_DISCIPLINE, TGW_BUFSIZE   discipline of the headers; the buffer size
 *                       is also the read/splice chunk
 * Nothing outside the root is ever opened: ".." components and absolute
 * names are refused outright (403), and the open itself is confined with
 * openat2(RESOLVE_BENEATH), which also refuses symlinks that lead out (403).
 * Where openat2 is missing the name is walked with O_NOFOLLOW instead, and
 * then no symlink at all is followed.
 * A missing file is 404; anything but a regular file is 403.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cgi_util.h"

/* Lexical check before touching the file system: no absolute name and no
 * ".." component (an empty name is not ours to judge here). */
static int name_is_safe(const char *name)
{
    if (name[0] == '/')
        return 0;
    for (const char *p = name; *p;) {
        size_t k = strcspn(p, "/");
        if (k == 2 && p[0] == '.' && p[1] == '.')
            return 0;
        p += k + (p[k] == '/');
    }
    return 1;
}

/* The fallback where openat2 is missing (kernels before 5.6, valgrind, some
 * seccomp sandboxes): open one component at a time with O_NOFOLLOW, so no
 * symlink is followed at all (ELOOP).  ".." never gets here. */
static int open_walk(int dir, const char *name, int flags)
{
    int cur = dir;
    for (const char *p = name;;) {
        size_t k = strcspn(p, "/");
        const char *next = p + k + strspn(p + k, "/");
        char comp[NAME_MAX + 1];
        if (k > NAME_MAX) {
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(comp, p, k);
        comp[k] = '\0';
        int last = *next == '\0';
        int fd = openat(cur, comp, last ? flags | O_NOFOLLOW
                                        : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 && errno == ENOTDIR && !last &&
            fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            errno = ELOOP; /* a symlinked directory: refused, not missing */
        int e = errno;
        if (cur != dir)
            close(cur);
        errno = e;
        if (fd < 0 || last)
            return fd;
        cur = fd;
        p = next;
    }
}

/* Open name beneath root; on failure return -1 with the HTTP status in
 * *status. */
static int open_beneath(const char *root, const char *name, int *status)
{
    int dir = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) {
        perror(root);
        *status = 500;
        return -1;
    }
    /* O_NONBLOCK: opening a FIFO planted in the root must not hang us. */
    struct open_how how = {
        .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    int fd = (int)syscall(SYS_openat2, dir, name, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS)
        fd = open_walk(dir, name, (int)how.flags);
    int e = errno;
    close(dir);
    if (fd >= 0)
        return fd;
    switch (e) {
    case ENOENT:
    case ENOTDIR:
    case ENAMETOOLONG:
        *status = 404;
        break;
    case EXDEV: /* the path tried to leave the root */
    case ELOOP:
    case EACCES:
    case EPERM:
        *status = 403;
        break;
    default:
        fprintf(stderr, "download.cgi: openat2 %s: %s\n", name, strerror(e));
        *status = 500;
    }
    return -1;
}

int main(void)
{
    tgw_out *out = cgi_open_stdout("download.cgi");
    if (!out)
        return 1;

    char beside[4096];
    const char *root = getenv("TGW_DOWNLOAD_ROOT");
    if ((!root || !*root) && cgi_beside_self("../files", beside, sizeof beside) == 0)
        root = beside;
    struct stat rst;
    const char *mname = getenv("TGW_FILE_METHOD");
    const char *pi = getenv("PATH_INFO");
    const char *method = getenv("REQUEST_METHOD");
    enum tgw_file_method m = TGW_FILE_MMAP;
    char name[4096];
    int status = 0, fd = -1, r;
    struct stat st;

    if (pi && *pi) {
        pi += pi[0] == '/'; /* PATH_INFO always starts with one */
        if (strlen(pi) >= sizeof name)
            status = 404;
        else
            strcpy(name, pi);
    } else if (cgi_query_param(getenv("QUERY_STRING"), "file", name,
                               sizeof name) < 0) {
        status = 400;
    }

    if (!root || stat(root, &rst) || !S_ISDIR(rst.st_mode) ||
        (mname && *mname && tgw_file_method_parse(mname, &m))) {
        fprintf(stderr, "download.cgi: no directory %s: set TGW_DOWNLOAD_ROOT, and "
                        "TGW_FILE_METHOD to read|mmap|sendfile|splice\n",
                root ? root : "(none)");
        status = 500;
    }
    if (!status && (!name[0] || !name_is_safe(name)))
        status = name[0] ? 403 : 400;
    if (!status && (fd = open_beneath(root, name, &status)) >= 0) {
        if (fstat(fd, &st))
            status = 500;
        else if (!S_ISREG(st.st_mode))
            status = 403;
    }

    if (status) {
        r = cgi_error(out, status,
                      status == 404   ? "no such file"
                      : status == 403 ? "forbidden"
                      : status == 400 ? "name a file: /NAME or ?file=NAME"
                                      : "server error");
    } else {
        r = tgw_printf(out,
                       "Content-Type: application/octet-stream\n"
                       "Content-Length: %lld\n\n",
                       (long long)st.st_size) < 0;
        if (!r && !(method && strcmp(method, "HEAD") == 0))
            r = tgw_send_fd(out, fd, 0, st.st_size, m, tgw_bufsize(out));
    }
    if (fd >= 0)
        close(fd);
    if (tgw_close(out) || r) {
        perror("download.cgi: write");
        return 1;
    }
    return 0;
}
