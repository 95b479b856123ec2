/* Reference for `tern probe processes`: fork + _exit(0) + waitpid; ROUNDS
 * rounds (default 50) of N forks (default 20); prints the best and the
 * median round in ns per fork, nothing subtracted.
 *
 * fork copies the parent's mappings and the page tables of its anonymous
 * memory, so its cost grows with the parent. Given ANON_KIB MAPS THREADS
 * (what `tern probe` reports of its own process), the loop first grows
 * itself to that size: anonymous memory written until its RssAnon reaches
 * ANON_KIB, untouched mappings (which fork copies without page tables, like
 * tern's file mappings) until it has MAPS, and threads blocked for good
 * until it has THREADS.
 * Usage: fork [N [ROUNDS [ANON_KIB MAPS THREADS]]] */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../crates/tern/tests/probe_refs/rounds.h"

/* A field of /proc/self/status ("RssAnon:", "Threads:"), in its unit. */
static long status_field(const char *name) {
    char line[256];
    long value = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, name, strlen(name)) == 0)
            value = atol(line + strlen(name));
    if (f)
        fclose(f);
    return value;
}

static long mappings(void) {
    long n = 0;
    int c;
    FILE *f = fopen("/proc/self/maps", "r");
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

static void *blocked(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static void grow(long anon_kib, long maps, long threads) {
    long page = sysconf(_SC_PAGESIZE);
    for (long t = status_field("Threads:"); t < threads; t++) {
        pthread_t id;
        if (pthread_create(&id, NULL, blocked, NULL))
            exit(1);
    }
    long missing = anon_kib - status_field("RssAnon:");
    if (missing > 0) {
        char *p = mmap(NULL, missing * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            exit(1);
        memset(p, 1, missing * 1024);
    }
    /* Alternate protections, so the kernel does not merge neighbours. */
    for (long m = mappings(), i = 0; m < maps; m++, i++)
        if (mmap(NULL, page, i % 2 ? PROT_READ : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
            exit(1);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 50;
    if (n < 1 || rounds < 1 || (argc != 6 && argc > 3))
        return 2;
    if (argc == 6)
        grow(atol(argv[3]), atol(argv[4]), atol(argv[5]));
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
