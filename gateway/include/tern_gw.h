/*
 * tern_gw — output disciplines and file-output methods for CGI programs.
 *
 * A CGI program opens a tgw_out on its output fd (normally STDOUT_FILENO),
 * choosing how its bytes are buffered and flushed, and writes through it.
 * All functions report errors by return value (-1 / NULL with errno set);
 * nothing aborts.  Output fds are expected to be in blocking mode, but a
 * non-blocking fd also works (EAGAIN is waited out with poll()).
 *
 * The library never closes the fd it was given.
 */
#ifndef TERN_GW_H
#define TERN_GW_H

#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Output disciplines, numbered as in the published study.
 * Each is {buffer placement} x {flush policy}:
 *
 *   d  placement  policy
 *   1  heap       stdio (glibc FILE, full buffering)
 *   2  mmap       stdio (setvbuf with an anonymous-mmap buffer)
 *   3  heap       exact: when full, write exactly one buffer, carry the rest
 *   4  heap       overflow: when full, write buffer + overflow in one writev
 *   5  mmap       exact
 *   6  mmap       overflow
 */
enum tgw_discipline {
    TGW_STDIO = 1,
    TGW_STDIO_MMAP = 2,
    TGW_OWN_EXACT = 3,
    TGW_OWN_OVERFLOW = 4,
    TGW_OWN_EXACT_MMAP = 5,
    TGW_OWN_OVERFLOW_MMAP = 6,
};

/* Methods for sending a file to the output fd (7 and 8 as in the study). */
enum tgw_file_method {
    TGW_FILE_READ = 7,     /* pread() into a buffer, write() it */
    TGW_FILE_MMAP = 8,     /* mmap() the file, write() from the mapping */
    TGW_FILE_SENDFILE = 9, /* sendfile(2) */
    TGW_FILE_SPLICE = 10,  /* splice(2), through a pipe unless out is one */
};

/* bufsize 0 means BUFSIZ (stdio's default) everywhere in this API. */
#define TGW_DEFAULT_ENV_BUFSIZE 16384

typedef struct tgw_out tgw_out;

/* Open an output stream on fd.  bufsize >= 1 (0 = BUFSIZ).
 * Returns NULL with errno set (EINVAL for a bad discipline). */
tgw_out *tgw_open(int fd, enum tgw_discipline d, size_t bufsize);

/* Like tgw_open, with the discipline from $TGW_DISCIPLINE (1-6, default 1)
 * and the size from $TGW_BUFSIZE (bytes, optional K suffix, default 16384).
 * An unparsable value fails with EINVAL rather than being silently ignored. */
tgw_out *tgw_open_env(int fd);

/* 0 on success, -1 on error.  After an error the stream stays failed
 * (every later call returns -1 with the same errno), like ferror(). */
int tgw_write(tgw_out *out, const void *buf, size_t len);
int tgw_puts(tgw_out *out, const char *s); /* like fputs: no newline added */
int tgw_printf(tgw_out *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3))); /* returns chars written or -1 */
int tgw_vprintf(tgw_out *out, const char *fmt, va_list ap);
int tgw_flush(tgw_out *out);
/* Flushes and frees; the fd stays open.  -1 if the final flush failed. */
int tgw_close(tgw_out *out);

int tgw_fd(const tgw_out *out);
enum tgw_discipline tgw_discipline_of(const tgw_out *out);
size_t tgw_bufsize(const tgw_out *out);

/* Send len bytes of in_fd starting at offset, after flushing pending
 * buffered output so ordering is preserved.  bufsize is the read buffer for
 * TGW_FILE_READ and the bytes moved per splice() for TGW_FILE_SPLICE; mmap
 * and sendfile hand the whole range to the kernel.  The file position of
 * in_fd is not used or changed.  If the file ends before offset+len, fails
 * with EIO (a Content-Length already sent would otherwise be a lie). */
int tgw_send_fd(tgw_out *out, int in_fd, off_t offset, off_t len,
                enum tgw_file_method m, size_t bufsize);
/* Open path, send the whole file, close it. */
int tgw_send_file(tgw_out *out, const char *path, enum tgw_file_method m,
                  size_t bufsize);

/* Names and parsing, for command lines and environment variables. */
const char *tgw_discipline_name(enum tgw_discipline d); /* "stdio", ... */
const char *tgw_file_method_name(enum tgw_file_method m); /* "read", ... */
int tgw_file_method_parse(const char *s, enum tgw_file_method *m); /* 0/-1 */
/* "16384", "16K", "16k" -> bytes.  0/-1; 0 is rejected. */
int tgw_parse_size(const char *s, size_t *out);

/*
 * The bulletin-board query interface: a data file of posts, one per line,
 * fields separated by tabs: author, date, subject, body.  A line with fewer
 * fields has the missing ones empty; tabs after the fourth field stay in the
 * body.  A trailing CR is dropped.  The file is read once at connect; the
 * strings returned by tgw_board_get live until tgw_board_release.
 */
typedef struct tgw_board tgw_board;

struct tgw_str {
    const char *p;
    size_t n;
};

struct tgw_post {
    struct tgw_str line; /* the whole line, without its newline */
    struct tgw_str author, date, subject, body;
};

tgw_board *tgw_board_connect(const char *path); /* NULL + errno */
size_t tgw_board_count(const tgw_board *b);
/* Line numbers start at 1.  -1 with errno ERANGE when n is 0 or > count. */
int tgw_board_get(const tgw_board *b, size_t n, struct tgw_post *post);
void tgw_board_release(tgw_board *b);

#ifdef __cplusplus
}
#endif

#endif
