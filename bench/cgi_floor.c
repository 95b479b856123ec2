/*
 * cgi_floor: the cheapest a server could run a CGI program, for bench/cgi.sh.
 *
 *   cgi_floor [-n RUNS] [-m spawn|fork|vfork] [-M MIB] PROGRAM
 *
 * Runs PROGRAM RUNS times, one at a time, the way a CGI server does (stdin
 * /dev/null, stdout a pipe read to EOF, the child reaped), with no HTTP at
 * all, and prints the CPU time per run: this process's own (getrusage SELF)
 * and the programs' (getrusage CHILDREN), plus wall time. -m chooses how the
 * child is made: posix_spawn (glibc: clone(CLONE_VM|CLONE_VFORK)), vfork +
 * execve, or fork + execve. -M first touches MIB MiB of heap, so a fork has a
 * larger address space to copy, as in a large server. Output: one line of
 * "key=value" fields.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double tv_ms(struct timeval tv)
{
    return tv.tv_sec * 1e3 + tv.tv_usec / 1e3;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void die(const char *what)
{
    fprintf(stderr, "cgi_floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Starts PROGRAM with stdin DEVNULL and stdout OUT; returns its pid. */
static pid_t start(const char *method, char *const argv[], int devnull, int out)
{
    pid_t pid;
    if (strcmp(method, "spawn") == 0) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, devnull, 0);
        posix_spawn_file_actions_adddup2(&fa, out, 1);
        int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) {
            errno = rc;
            die("posix_spawn");
        }
        return pid;
    }
    pid = strcmp(method, "vfork") == 0 ? vfork() : fork();
    if (pid < 0)
        die(method);
    if (pid == 0) {
        dup2(devnull, 0);
        dup2(out, 1);
        execve(argv[0], argv, environ);
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv)
{
    long runs = 2000, mib = 0;
    const char *method = "spawn";
    int opt;
    while ((opt = getopt(argc, argv, "n:m:M:")) != -1) {
        switch (opt) {
        case 'n': runs = strtol(optarg, NULL, 10); break;
        case 'm': method = optarg; break;
        case 'M': mib = strtol(optarg, NULL, 10); break;
        default: goto usage;
        }
    }
    if (optind != argc - 1 || runs <= 0 || mib < 0 ||
        (strcmp(method, "spawn") && strcmp(method, "fork") && strcmp(method, "vfork")))
        goto usage;
    char *child_argv[] = {argv[optind], NULL};

    if (mib > 0) {
        char *heap = malloc((size_t)mib << 20);
        if (!heap)
            die("malloc");
        memset(heap, 1, (size_t)mib << 20);   /* resident, so fork copies its page tables */
    }
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0)
        die("/dev/null");

    static char buf[65536];
    long long bytes = 0;
    long failed = 0;
    struct rusage s0, c0, s1, c1;
    getrusage(RUSAGE_SELF, &s0);
    getrusage(RUSAGE_CHILDREN, &c0);
    double t0 = now_ms();
    for (long i = 0; i < runs; i++) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
            die("pipe2");
        pid_t pid = start(method, child_argv, devnull, p[1]);
        close(p[1]);
        ssize_t n;
        while ((n = read(p[0], buf, sizeof buf)) != 0) {
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                die("read");
            }
            bytes += n;
        }
        close(p[0]);
        int status;
        while (waitpid(pid, &status, 0) < 0)
            if (errno != EINTR)
                die("waitpid");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed++;
    }
    double t1 = now_ms();
    getrusage(RUSAGE_SELF, &s1);
    getrusage(RUSAGE_CHILDREN, &c1);
    double self = tv_ms(s1.ru_utime) + tv_ms(s1.ru_stime) - tv_ms(s0.ru_utime) - tv_ms(s0.ru_stime);
    double kids = tv_ms(c1.ru_utime) + tv_ms(c1.ru_stime) - tv_ms(c0.ru_utime) - tv_ms(c0.ru_stime);
    printf("method=%s runs=%ld heap_mib=%ld bytes_per_run=%lld failed=%ld cpu_ms_per_run=%.4f "
           "parent_ms_per_run=%.4f program_ms_per_run=%.4f wall_ms_per_run=%.4f\n",
           method, runs, mib, bytes / runs, failed, (self + kids) / runs, self / runs, kids / runs,
           (t1 - t0) / runs);
    return failed ? 1 : 0;

usage:
    fprintf(stderr, "usage: cgi_floor [-n RUNS] [-m spawn|fork|vfork] [-M MIB] PROGRAM\n");
    return 2;
}
