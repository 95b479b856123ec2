/*
 * h2_floor_nghttp2: libnghttp2's floor, the least a server built on the C
 * library can spend per response, for bench/h2_floor.sh beside h2o, the h2
 * crate's floor (crates/tern-server/examples/h2_floor.rs) and tern. A bare
 * h2c server (prior knowledge, no TLS) on one thread and epoll (level
 * triggered), answering every request with one body held in memory and the
 * fields tern sends for a static file (so HPACK has the same work, under the
 * library's own policy: it never indexes etag and content-length), with no
 * routing, no file, no log. Its frames are gathered as tern gathers them:
 * whatever one read() brought is fed to the session, then everything the
 * session has to send is drained into one buffer and written with one
 * write(). The body goes out with NGHTTP2_DATA_FLAG_NO_COPY:
 * send_data_callback appends the frame header and the body to that buffer,
 * one copy (a copying read callback costs one more, into the library's
 * buffer; measured no faster).
 *
 *   h2_floor_nghttp2 127.0.0.1:PORT FILE
 *
 * Build: gcc -O2 -Wall -Wextra -o h2_floor_nghttp2 h2_floor_nghttp2.c -lnghttp2
 * (Debian: libnghttp2-dev).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

static uint8_t *body;
static size_t body_len;
static char content_length[24];
static nghttp2_session_callbacks *callbacks;
static int epfd;

/* One connection: its session and the gathered output not yet written. */
struct conn {
    int fd;
    int want_out; /* EPOLLOUT registered: out[outoff..outlen) waits */
    nghttp2_session *session;
    uint8_t *out;
    size_t outlen, outoff, outcap;
};

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static int append(struct conn *c, const uint8_t *p, size_t n)
{
    if (c->outlen + n > c->outcap) {
        size_t cap = c->outcap ? c->outcap : 16384;
        while (cap < c->outlen + n) cap *= 2;
        uint8_t *q = realloc(c->out, cap);
        if (!q) return -1;
        c->out = q;
        c->outcap = cap;
    }
    memcpy(c->out + c->outlen, p, n);
    c->outlen += n;
    return 0;
}

/* The body's next chunk; source->ptr holds the stream's offset into it
 * (advanced when the frame is sent: the library passes the same source). */
static ssize_t body_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)session; (void)stream_id; (void)buf; (void)user_data;
    size_t off = (uintptr_t)source->ptr, n = body_len - off;
    if (n > length) n = length;
    *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    if (off + n == body_len) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int send_data(nghttp2_session *session, nghttp2_frame *frame, const uint8_t *framehd,
                     size_t length, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    struct conn *c = user_data;
    size_t off = (uintptr_t)source->ptr;
    size_t pad = frame->data.padlen; /* never set by this server; handled anyway */
    static const uint8_t zeros[256];
    uint8_t padlen = (uint8_t)(pad ? pad - 1 : 0);
    if (append(c, framehd, 9) || (pad && append(c, &padlen, 1)) || append(c, body + off, length) ||
        (pad > 1 && append(c, zeros, pad - 1)))
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    source->ptr = (void *)(uintptr_t)(off + length);
    return 0;
}

#define NV(n, v)                                                                    \
    {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1,                  \
     NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}

static nghttp2_nv fields[] = {
    NV(":status", "200"),
    NV("server", "h2floor"),
    NV("date", "Sat, 28 Nov 2026 22:47:52 GMT"),
    NV("content-type", "text/plain; charset=utf-8"),
    NV("last-modified", "Sat, 28 Nov 2026 22:45:25 GMT"),
    NV("etag", "\"6b0b5985.6ac86f8-400\""),
    NV("accept-ranges", "bytes"),
    NV("vary", "Accept-Encoding"),
    NV("content-length", ""), /* value set in main */
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

/* A request is complete at its END_STREAM (on HEADERS, DATA or trailers). */
static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    (void)user_data;
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        nghttp2_data_provider prd = {.source.ptr = NULL, .read_callback = body_read};
        if (nghttp2_submit_response(session, frame->hd.stream_id, fields, NFIELDS, &prd) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static void conn_close(struct conn *c)
{
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    nghttp2_session_del(c->session);
    free(c->out);
    free(c);
}

static int set_out(struct conn *c, int on)
{
    if (c->want_out == on) return 0;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    c->want_out = on;
    return epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Writes what the buffer holds: 0 once all of it went, 1 when the socket is
 * full (EPOLLOUT asked for), -1 to close. */
static int write_out(struct conn *c)
{
    while (c->outoff < c->outlen) {
        ssize_t n = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return set_out(c, 1) ? -1 : 1;
            return -1;
        }
        c->outoff += (size_t)n;
    }
    c->outoff = c->outlen = 0;
    return 0;
}

/* Writes what waits; then, if all of it went, gathers everything the session
 * has to send and writes it with one write(). Returns -1 to close. */
static int flush(struct conn *c)
{
    int w = write_out(c);
    if (w) return w < 0 ? -1 : 0;
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        if (n < 0) return -1;
        if (n == 0) break;
        if (append(c, data, (size_t)n)) return -1;
    }
    w = write_out(c);
    if (w) return w < 0 ? -1 : 0;
    if (set_out(c, 0)) return -1;
    return nghttp2_session_want_read(c->session) || nghttp2_session_want_write(c->session) ? 0 : -1;
}

static void conn_open(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct conn *c = calloc(1, sizeof *c);
    if (!c) { close(fd); return; }
    c->fd = fd;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100}};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (nghttp2_session_server_new(&c->session, callbacks, c) != 0) { close(fd); free(c); return; }
    if (nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, 1) != 0 ||
        epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        nghttp2_session_del(c->session); close(fd); free(c); return;
    }
    /* The SETTINGS go out with the first answer: a client by prior
     * knowledge sends its preface without waiting for ours. */
}

static void conn_read(struct conn *c)
{
    static uint8_t buf[65536];
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0 || nghttp2_session_mem_recv(c->session, buf, (size_t)n) != n || flush(c)) conn_close(c);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: h2_floor_nghttp2 ADDRESS:PORT FILE\n");
        return 2;
    }
    char *colon = strrchr(argv[1], ':');
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (!colon || inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr) != 1) {
        fprintf(stderr, "h2_floor_nghttp2: ADDRESS:PORT expected, got %s\n", argv[1]);
        return 2;
    }
    *colon = 0;
    if (strcmp(argv[1], "127.0.0.1") != 0 && strcmp(argv[1], "localhost") != 0)
        fprintf(stderr, "h2_floor_nghttp2: listening on 127.0.0.1 only, not %s\n", argv[1]);
    sa.sin_port = htons((uint16_t)atoi(colon + 1));

    int fd = open(argv[2], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) die(argv[2]);
    body_len = (size_t)st.st_size;
    body = malloc(body_len ? body_len : 1);
    for (size_t got = 0; got < body_len;) {
        ssize_t n = read(fd, body + got, body_len - got);
        if (n <= 0) die(argv[2]);
        got += (size_t)n;
    }
    close(fd);
    snprintf(content_length, sizeof content_length, "%zu", body_len);
    fields[NFIELDS - 1].value = (uint8_t *)content_length;
    fields[NFIELDS - 1].valuelen = strlen(content_length);

    signal(SIGPIPE, SIG_IGN);
    if (nghttp2_session_callbacks_new(&callbacks) != 0) die("nghttp2_session_callbacks_new");
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
    nghttp2_session_callbacks_set_send_data_callback(callbacks, send_data);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    if (lfd < 0) die("socket");
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0) die("bind");
    if (listen(lfd, 1024) != 0) die("listen");
    if ((epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) != 0) die("epoll_ctl");
    fprintf(stderr, "h2_floor_nghttp2: listening on 127.0.0.1:%u, %zu bytes\n", ntohs(sa.sin_port), body_len);

    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(epfd, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c) {
                int cfd;
                while ((cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) conn_open(cfd);
                continue;
            }
            if (evs[i].events & EPOLLOUT) {
                if (flush(c)) { conn_close(c); continue; }
            }
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) conn_read(c);
        }
    }
}
