/*
 * idleconns.c: opens N keep-alive connections to a server, makes one GET on
 * each (reading the whole response), then holds them all open and idle, so that
 * bench/static.sh can measure the server's memory with N idle connections.
 *
 * Build: gcc -O2 -o idleconns idleconns.c
 * Usage: idleconns -p PORT [-a ADDR] [-n CONNS] [-u PATH] [-H HOLD_SECONDS]
 *
 * Output on stdout, one line each, flushed:
 *   "ready OPENED FAILED"   once every connection was tried (FAILED > 0 means
 *                           some could not connect or got no full response;
 *                           the first error is on stderr)
 *   "open STILL_OPEN CLOSED" when the hold ends (after HOLD_SECONDS, default 30,
 *                           or at SIGTERM/SIGINT/SIGUSR1): how many connections
 *                           the server had closed meanwhile.
 * Every socket operation has a 5 s timeout, so the program always ends.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

/* Reads one full response (headers + Content-Length body). 0 on success. */
static int read_response(int fd, char *err, size_t errlen) {
    char buf[65536];
    size_t have = 0;
    long body = -1;
    size_t head_end = 0;
    for (;;) {
        if (have == sizeof buf && body < 0) { snprintf(err, errlen, "response head too large"); return -1; }
        size_t room = body >= 0 ? sizeof buf : sizeof buf - have;
        ssize_t r = read(fd, body >= 0 ? buf : buf + have, room);
        if (r < 0) { snprintf(err, errlen, "read: %s", strerror(errno)); return -1; }
        if (r == 0) { snprintf(err, errlen, "server closed the connection before the response ended"); return -1; }
        if (body >= 0) {
            have += (size_t)r;
        } else {
            have += (size_t)r;
            char *end = memmem(buf, have, "\r\n\r\n", 4);
            if (!end) continue;
            head_end = (size_t)(end - buf) + 4;
            if (strncmp(buf, "HTTP/1.1 200", 12) != 0) {
                snprintf(err, errlen, "status line: %.40s", buf);
                return -1;
            }
            body = 0;
            for (char *line = buf; line < end; ) {
                char *nl = memmem(line, (size_t)(end - line) + 2, "\r\n", 2);
                if (!nl) break;
                if (strncasecmp(line, "content-length:", 15) == 0) body = atol(line + 15);
                line = nl + 2;
            }
            have -= head_end; /* body bytes already read */
        }
        if ((long)have >= body) return 0;
    }
}

int main(int argc, char **argv) {
    const char *addr = "127.0.0.1", *path = "/1k.bin";
    int port = 0, n = 5000, hold = 30, opt;
    while ((opt = getopt(argc, argv, "a:p:n:u:H:")) != -1) {
        switch (opt) {
        case 'a': addr = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'n': n = atoi(optarg); break;
        case 'u': path = optarg; break;
        case 'H': hold = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s -p PORT [-a ADDR] [-n CONNS] [-u PATH] [-H HOLD_SECONDS]\n", argv[0]);
            return 2;
        }
    }
    if (port <= 0 || port > 65535 || n <= 0 || hold < 0) {
        fprintf(stderr, "idleconns: need -p PORT, -n > 0, -H >= 0\n");
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) { fprintf(stderr, "idleconns: bad address %s\n", addr); return 2; }
    char req[512];
    int reqlen = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: idleconns\r\n\r\n", path, addr, port);

    int *fds = calloc((size_t)n, sizeof *fds);
    if (!fds) { perror("calloc"); return 1; }
    int opened = 0, failed = 0;
    char err[256] = "";
    struct timeval tv = {.tv_sec = 5};
    for (int i = 0; i < n && !g_stop; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            if (!failed) fprintf(stderr, "idleconns: socket #%d: %s\n", i, strerror(errno));
            failed++;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, (struct sockaddr *)&sin, sizeof sin) < 0) {
            if (!failed) fprintf(stderr, "idleconns: connect #%d: %s\n", i, strerror(errno));
            failed++;
            close(fd);
            continue;
        }
        if (write(fd, req, (size_t)reqlen) != reqlen) {
            if (!failed) fprintf(stderr, "idleconns: write #%d: %s\n", i, strerror(errno));
            failed++;
            close(fd);
            continue;
        }
        if (read_response(fd, err, sizeof err) != 0) {
            if (!failed) fprintf(stderr, "idleconns: response #%d: %s\n", i, err);
            failed++;
            close(fd);
            continue;
        }
        fds[opened++] = fd;
    }
    printf("ready %d %d\n", opened, failed);
    fflush(stdout);

    time_t until = time(NULL) + hold;
    while (!g_stop && time(NULL) < until) usleep(50000);

    /* A connection the server closed is readable (EOF) or hung up. */
    int closed = 0;
    struct pollfd *pfds = calloc((size_t)(opened ? opened : 1), sizeof *pfds);
    if (!pfds) { perror("calloc"); return 1; }
    for (int i = 0; i < opened; i++) pfds[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    if (opened && poll(pfds, (nfds_t)opened, 0) > 0)
        for (int i = 0; i < opened; i++)
            if (pfds[i].revents) closed++;
    printf("open %d %d\n", opened - closed, closed);
    fflush(stdout);
    return failed ? 1 : 0;
}
