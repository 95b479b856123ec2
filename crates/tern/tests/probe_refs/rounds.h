/* Shared by the C references: a clock, and the best and the median of the
 * per-round figures, printed as "BEST MEDIAN" (ns per operation). The tests
 * compare best with tern's best sample; bench/probe.sh compares the median
 * with tern's median over the same rounds (as many, as long). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts `per` (one figure per round) and prints its best and median. */
static void print_best_median(double *per, int rounds, const char *format) {
    qsort(per, rounds, sizeof *per, by_value);
    double median = rounds % 2 ? per[rounds / 2] : (per[rounds / 2 - 1] + per[rounds / 2]) / 2;
    printf(format, per[0], median);
}
