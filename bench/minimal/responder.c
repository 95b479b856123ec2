/*
 * responder.c: the minimal C epoll HTTP responder, the ceiling reference of
 * bench/static.sh.
 *
 * N threads (default 2), each with its own SO_REUSEPORT listener and its own
 * level-triggered epoll instance. Sockets are non-blocking. For every readable
 * connection it does one read() of whatever has arrived, counts the request ends
 * ("\r\n\r\n", also when split across reads, so pipelined requests are answered
 * one response each) and writes that many copies of one fixed keep-alive
 * response with a BODY-byte body (default 1024) and a Content-Length. It ignores
 * request contents entirely: no parsing, no file, no date. Per keep-alive request
 * that is one read, one write and a share of one epoll_wait.
 *
 * Build: gcc -O2 -pthread -o responder responder.c
 * Usage: responder [-a ADDR] [-p PORT] [-t THREADS] [-s BODY_BYTES]
 * Prints "listening on http://ADDR:PORT/" on stderr once every thread listens.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_EVENTS 256
#define READ_BUF 16384

struct conn {
    unsigned char match;  /* bytes of "\r\n\r\n" matched at the end of the last read */
    size_t pending_off;   /* unsent bytes of the current batch: [off, len) of pending */
    size_t pending_len;
    char *pending;        /* NULL unless a write was short */
};

static const char *g_addr = "127.0.0.1";
static int g_port = 8080;
static char *g_resp;         /* one response */
static size_t g_resp_len;
static struct conn *g_conns; /* indexed by fd, g_max_fds entries */
static size_t g_max_fds;
static pthread_barrier_t g_ready;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static int make_listener(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) die("SO_REUSEADDR");
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) die("SO_REUSEPORT");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)g_port)};
    if (inet_pton(AF_INET, g_addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "responder: bad address %s\n", g_addr);
        exit(2);
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) die("bind");
    if (listen(fd, 4096) < 0) die("listen");
    return fd;
}

static void close_conn(int fd) {
    struct conn *c = &g_conns[fd];
    free(c->pending);
    memset(c, 0, sizeof *c);
    close(fd); /* also removes it from the epoll set */
}

/* Counts request ends in buf, carrying the partial match across reads. */
static size_t count_request_ends(struct conn *c, const char *buf, size_t n) {
    static const char end[4] = {'\r', '\n', '\r', '\n'};
    size_t count = 0;
    unsigned m = c->match;
    for (size_t i = 0; i < n; i++) {
        char ch = buf[i];
        if (ch == end[m]) {
            if (++m == 4) { count++; m = 0; }
        } else {
            m = (ch == '\r') ? 1 : 0;
        }
    }
    c->match = (unsigned char)m;
    return count;
}

/* Writes what is pending; returns 0 when all sent, 1 when blocked, -1 on error. */
static int flush_pending(int ep, int fd, struct conn *c) {
    while (c->pending_off < c->pending_len) {
        ssize_t w = write(fd, c->pending + c->pending_off, c->pending_len - c->pending_off);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                struct epoll_event ev = {.events = EPOLLOUT, .data.fd = fd};
                if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) < 0) return -1;
                return 1;
            }
            return -1;
        }
        c->pending_off += (size_t)w;
    }
    free(c->pending);
    c->pending = NULL;
    c->pending_off = c->pending_len = 0;
    return 0;
}

/* Queues `count` responses and sends them; same return values as flush_pending. */
static int respond(int ep, int fd, struct conn *c, size_t count) {
    if (count == 1 && c->pending == NULL) {
        ssize_t w = write(fd, g_resp, g_resp_len);
        if (w == (ssize_t)g_resp_len) return 0;
        if (w < 0 && errno != EAGAIN && errno != EINTR) return -1;
        size_t done = w > 0 ? (size_t)w : 0;
        c->pending = malloc(g_resp_len);
        if (!c->pending) return -1;
        memcpy(c->pending, g_resp, g_resp_len);
        c->pending_off = done;
        c->pending_len = g_resp_len;
        return flush_pending(ep, fd, c);
    }
    size_t old = c->pending_len - c->pending_off;
    char *buf = malloc(old + count * g_resp_len);
    if (!buf) return -1;
    if (old) memcpy(buf, c->pending + c->pending_off, old);
    for (size_t i = 0; i < count; i++) memcpy(buf + old + i * g_resp_len, g_resp, g_resp_len);
    free(c->pending);
    c->pending = buf;
    c->pending_off = 0;
    c->pending_len = old + count * g_resp_len;
    return flush_pending(ep, fd, c);
}

static void *worker(void *arg) {
    (void)arg;
    int lfd = make_listener();
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0) die("epoll_ctl listener");
    pthread_barrier_wait(&g_ready);

    struct epoll_event events[MAX_EVENTS];
    char buf[READ_BUF];
    for (;;) {
        int n = epoll_wait(ep, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == lfd) {
                for (;;) {
                    int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (cfd < 0) break; /* EAGAIN, or a transient error: wait for the next event */
                    if ((size_t)cfd >= g_max_fds) { close(cfd); continue; }
                    int one = 1;
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = cfd};
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &cev) < 0) close(cfd);
                }
                continue;
            }
            struct conn *c = &g_conns[fd];
            if (events[i].events & EPOLLOUT) {
                int r = flush_pending(ep, fd, c);
                if (r < 0) { close_conn(fd); continue; }
                if (r == 0) {
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = fd};
                    if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &cev) < 0) { close_conn(fd); continue; }
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                close_conn(fd);
                continue;
            }
            size_t count = count_request_ends(c, buf, (size_t)r);
            /* If output is blocked, respond() queues behind it; EPOLLOUT flushes. */
            if (count > 0 && respond(ep, fd, c, count) < 0) close_conn(fd);
        }
    }
    return NULL;
}

static void usage(const char *prog) {
    fprintf(stderr, "usage: %s [-a ADDR] [-p PORT] [-t THREADS] [-s BODY_BYTES]\n", prog);
    exit(2);
}

int main(int argc, char **argv) {
    int threads = 2;
    long body = 1024;
    int opt;
    while ((opt = getopt(argc, argv, "a:p:t:s:h")) != -1) {
        switch (opt) {
        case 'a': g_addr = optarg; break;
        case 'p': g_port = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 's': body = atol(optarg); break;
        default: usage(argv[0]);
        }
    }
    if (threads < 1 || threads > 256 || g_port < 1 || g_port > 65535 || body < 0 || body > (1 << 24))
        usage(argv[0]);
    signal(SIGPIPE, SIG_IGN);

    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nServer: minimal\r\nContent-Type: application/octet-stream\r\n"
                      "Content-Length: %ld\r\nConnection: keep-alive\r\n\r\n",
                      body);
    g_resp_len = (size_t)hl + (size_t)body;
    g_resp = malloc(g_resp_len);
    struct rlimit rl;
    g_max_fds = (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) ? rl.rlim_cur : 65536;
    g_conns = calloc(g_max_fds, sizeof *g_conns);
    if (!g_resp || !g_conns) die("malloc");
    memcpy(g_resp, head, (size_t)hl);
    for (long i = 0; i < body; i++) g_resp[hl + i] = (char)('a' + i % 26);

    pthread_barrier_init(&g_ready, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0) die("pthread_create");
        pthread_detach(t);
    }
    pthread_barrier_wait(&g_ready);
    fprintf(stderr, "listening on http://%s:%d/\n", g_addr, g_port);
    for (;;) pause();
}
