/* Reference for `tern probe processes`: fork + _exit(0) + waitpid, the best
 * of 50 rounds of 20, in ns per fork, nothing subtracted. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(void) {
    double best = 1e18;
    for (int round = 0; round < 50; round++) {
        double t0 = now();
        for (int i = 0; i < 20; i++) {
            pid_t pid = fork();
            if (pid == 0)
                _exit(0);
            waitpid(pid, NULL, 0);
        }
        double per = (now() - t0) / 20;
        if (per < best)
            best = per;
    }
    printf("%.0f\n", best);
    return 0;
}
