/* Reference for `tern probe processes`: fork + _exit(0) + waitpid; ROUNDS
 * rounds (default 50) of N forks (default 20); prints the best and the
 * median round in ns per fork, nothing subtracted.
 * Usage: fork [N [ROUNDS]] */
#include <sys/wait.h>
#include <unistd.h>

#include "../../crates/tern/tests/probe_refs/rounds.h"

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 50;
    if (n < 1 || rounds < 1)
        return 2;
    double *per = calloc(rounds, sizeof *per);
    for (int round = 0; round < rounds; round++) {
        double t0 = now();
        for (long i = 0; i < n; i++) {
            pid_t pid = fork();
            if (pid == 0)
                _exit(0);
            waitpid(pid, NULL, 0);
        }
        per[round] = (now() - t0) / n;
    }
    print_best_median(per, rounds, "%.0f %.0f\n");
    return 0;
}
