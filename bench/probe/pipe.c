/* Reference for `tern probe ipc`: round trips of 1 byte through two pipes
 * against an echo thread (as tern's peer is a thread), ROUNDS rounds
 * (default 11) of N round trips (default 1000); prints the best and the
 * median round in ns per round trip, nothing subtracted. perf bench sched
 * pipe -T times one long run of two fresh threads and reports its mean;
 * this times rounds the way tern does, so medians can be set side by side.
 * With ECHO_CPU the echo thread runs on that CPU (the caller on the one
 * taskset gave it): tern's "pipe round trip, 1 byte, across CPUs".
 * Usage: pipe [N [ROUNDS [ECHO_CPU]]] */
#define _GNU_SOURCE /* sched_setaffinity, for ECHO_CPU */
#include <pthread.h>
#include <unistd.h>

#include "../../crates/tern/tests/probe_refs/rounds.h"
#include "../../crates/tern/tests/probe_refs/pin.h"

static int to_echo[2], from_echo[2], echo_cpu = -1;

static void *echo(void *arg) {
    char c;
    (void)arg;
    if (pin_to(echo_cpu))
        exit(3);
    while (read(to_echo[0], &c, 1) == 1 && write(from_echo[1], &c, 1) == 1) {
    }
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    int rounds = argc > 2 ? atoi(argv[2]) : 11;
    echo_cpu = argc > 3 ? atoi(argv[3]) : -1;
    pthread_t thread;
    char c = 1;
    if (n < 1 || rounds < 1 || pipe(to_echo) || pipe(from_echo) || pthread_create(&thread, NULL, echo, NULL))
        return 2;
    double *per = calloc(rounds, sizeof *per);
    for (int round = 0; round < rounds; round++) {
        double t0 = now();
        for (long i = 0; i < n; i++)
            if (write(to_echo[1], &c, 1) != 1 || read(from_echo[0], &c, 1) != 1)
                return 1;
        per[round] = (now() - t0) / n;
    }
    close(to_echo[1]);
    pthread_join(thread, NULL);
    print_best_median(per, rounds, "%.0f %.0f\n");
    return 0;
}
