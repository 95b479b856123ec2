/* Independent reference for `tern probe syscalls`: ROUNDS rounds (default
 * 200) of N getppid calls (default 10000, ~1 ms: short enough that some
 * round escapes preemption on a loaded machine); prints the best and the
 * median round in ns per call, with nothing subtracted (the loop and one
 * clock read are a fraction of a ns per call at this N).
 * Usage: getppid [N [ROUNDS]] */
#include <unistd.h>

#include "rounds.h"

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000;
    int rounds = argc > 2 ? atoi(argv[2]) : 200;
    if (n < 1 || rounds < 1)
        return 2;
    double *per = calloc(rounds, sizeof *per);
    for (int round = 0; round < rounds; round++) {
        double t0 = now();
        for (long i = 0; i < n; i++)
            getppid();
        per[round] = (now() - t0) / n;
    }
    print_best_median(per, rounds, "%.2f %.2f\n");
    return 0;
}
