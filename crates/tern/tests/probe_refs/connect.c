/* Reference for `tern probe net`'s "TCP connect+close": lmbench's
 * lat_connect method. A listener on loopback accepts each connection and
 * closes it at once; the client times connect() (blocking) + close(), ROUNDS
 * rounds (default 11) of N connections (default 200); prints the best and
 * the median round in ns per connection, nothing subtracted. PEER is
 * "process" (default: the listener in a forked child, as lat_connect has
 * it) or "thread" (an accepting thread, as tern's loopback peer is).
 * Usage: connect [N [ROUNDS [PEER]]] */
#include <signal.h>
#include <sys/wait.h>

#include "peer.h"
#include "rounds.h"

static int lst;

/* Accepts and closes until the listener is shut down. */
static void *acceptor(void *arg) {
    (void)arg;
    for (;;) {
        int c = accept(lst, NULL, NULL);
        if (c < 0)
            return NULL;
        close(c);
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200;
    int rounds = argc > 2 ? atoi(argv[2]) : 11;
    const char *kind = argc > 3 ? argv[3] : "process";
    if (n < 1 || rounds < 1)
        return 2;
    double *per = calloc(rounds, sizeof *per);
    struct sockaddr_in addr;
    struct peer peer;
    if ((lst = peer_listen(&addr, SOMAXCONN)) < 0 || peer_start(&peer, kind, acceptor))
        return 1;
    for (int round = 0; round < rounds; round++) {
        double t0 = now();
        for (long i = 0; i < n; i++) {
            int s = socket(AF_INET, SOCK_STREAM, 0);
            if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr)) {
                perror("connect");
                return 1;
            }
            close(s);
        }
        per[round] = (now() - t0) / n;
    }
    if (peer.threaded) {
        shutdown(lst, SHUT_RDWR);
        pthread_join(peer.thread, NULL);
    } else {
        kill(peer.child, SIGTERM);
        waitpid(peer.child, NULL, 0);
    }
    print_best_median(per, rounds, "%.0f %.0f\n");
    return 0;
}
