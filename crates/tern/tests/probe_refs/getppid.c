/* Independent reference for `tern probe syscalls`: the best of 200 rounds of
 * N getppid calls (~1 ms each, short enough that some round escapes
 * preemption on a loaded machine), in ns per call, with nothing subtracted
 * (the loop and one clock read are a fraction of a ns per call at this N). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000;
    double best = 1e18;
    for (int round = 0; round < 200; round++) {
        double t0 = now();
        for (long i = 0; i < n; i++)
            getppid();
        double per = (now() - t0) / n;
        if (per < best)
            best = per;
    }
    printf("%.2f\n", best);
    return 0;
}
