/* Independent reference for `tern probe net`: TCP round trips of SIZE bytes
 * on loopback against an echo peer, TCP_NODELAY on both sides; ROUNDS rounds
 * (default 100) of N round trips (default 100); prints the best and the
 * median round in ns per round trip, with nothing subtracted. PEER is
 * "process" (default: a forked echo child) or "thread" (an echo thread, as
 * tern's loopback peer is: on one CPU a round trip then switches threads,
 * not address spaces, which is cheaper). With ECHO_CPU the echo runs on
 * that CPU (the caller on the one taskset gave it): tern's "TCP round trip,
 * 1 KiB, across CPUs".
 * Usage: tcp_pingpong [SIZE [N [ROUNDS [PEER [ECHO_CPU]]]]] */
#define _GNU_SOURCE /* sched_setaffinity, for ECHO_CPU */
#include <netinet/tcp.h>
#include <sys/wait.h>

#include "peer.h"
#include "pin.h"
#include "rounds.h"

static int full(ssize_t (*io)(int, void *, size_t), int fd, char *buf, size_t len) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = io(fd, buf + done, len - done);
        if (n <= 0)
            return -1;
        done += n;
    }
    return 0;
}

static ssize_t rd(int fd, void *b, size_t n) { return read(fd, b, n); }
static ssize_t wr(int fd, void *b, size_t n) { return write(fd, b, n); }

static size_t size;
static int lst, echo_cpu = -1;

/* Accepts one connection and echoes SIZE-byte messages until it closes. */
static void *echo(void *arg) {
    int one = 1;
    char *buf = calloc(1, size);
    (void)arg;
    if (pin_to(echo_cpu))
        exit(3);
    int c = accept(lst, NULL, NULL);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    while (full(rd, c, buf, size) == 0 && full(wr, c, buf, size) == 0) {
    }
    close(c);
    return NULL;
}

int main(int argc, char **argv) {
    size = argc > 1 ? (size_t)atol(argv[1]) : 1024;
    long n = argc > 2 ? atol(argv[2]) : 100;
    int rounds = argc > 3 ? atoi(argv[3]) : 100;
    const char *kind = argc > 4 ? argv[4] : "process";
    echo_cpu = argc > 5 ? atoi(argv[5]) : -1;
    if (size < 1 || n < 1 || rounds < 1)
        return 2;
    double *per = calloc(rounds, sizeof *per);
    char *buf = calloc(1, size);
    int one = 1;
    struct sockaddr_in addr;
    struct peer peer;
    if ((lst = peer_listen(&addr, 1)) < 0 || peer_start(&peer, kind, echo))
        return 1;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&addr, sizeof addr)) {
        perror("connect");
        return 1;
    }
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (int round = 0; round < rounds; round++) {
        double t0 = now();
        for (long i = 0; i < n; i++)
            if (full(wr, s, buf, size) || full(rd, s, buf, size)) {
                perror("round trip");
                return 1;
            }
        per[round] = (now() - t0) / n;
    }
    close(s);
    if (peer.threaded)
        pthread_join(peer.thread, NULL);
    else
        waitpid(peer.child, NULL, 0);
    print_best_median(per, rounds, "%.0f %.0f\n");
    return 0;
}
