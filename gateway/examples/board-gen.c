/*
 * board-gen: write a deterministic bulletin-board data file to stdout.
 *   board-gen [POSTS]      (default 300)
 * One post per line: author TAB date TAB subject TAB body.  The same
 * arguments always give the same bytes (examples/board-data.txt is
 * `board-gen 300`; the tests check that).  Some subjects and names carry
 * HTML metacharacters so the page generator's escaping is exercised.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint32_t next(uint32_t n) /* uniform-ish in [0, n) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

#define PICK(a) a[next(sizeof a / sizeof a[0])]

static const char *const authors[] = {
    "Ada Lovelace", "Alan Turing", "Barbara Liskov", "Brian Kernighan",
    "Dennis Ritchie", "Donald Knuth", "Edsger Dijkstra", "Frances Allen",
    "Grace Hopper", "John McCarthy", "Ken Thompson", "Leslie Lamport",
    "Margaret Hamilton", "Niklaus Wirth", "Radia Perlman", "Rob Pike",
    "Tony Hoare", "Vint Cerf", "Whitfield Diffie", "Jim O'Brien",
    "Smith & Sons", "sysadmin", "webmaster", "guest",
};

static const char *const topics[] = {
    "CGI", "buffering", "stdio", "mmap", "sendfile", "the pipe",
    "Solaris", "AIX", "Linux", "Digital UNIX", "kernel", "cache",
    "latency", "throughput", "benchmark", "page size", "the server",
    "writev", "fork", "the scheduler",
};

static const char *const openers[] = {
    "Question about", "Thoughts on", "Re:", "Help with", "Results for",
    "Why is", "Measuring", "Notes on", "Trouble with", "Tuning",
};

static const char *const odd_subjects[] = {
    "Is x < y && y > z always?", "<b>not bold</b>", "Tom & Jerry's \"bench\"",
};

static const char *const words[] = {
    "the", "a", "server", "buffer", "size", "was", "faster", "slower",
    "than", "with", "our", "output", "when", "we", "measured", "it",
    "on", "each", "host", "and", "file", "system", "call", "write",
    "read", "mapped", "memory", "copy", "kernel", "user", "time", "CPU",
    "per", "request", "page", "gateway", "script", "results", "show",
    "that", "every", "run", "differs", "by", "few", "percent", "flush",
    "one", "more", "process", "pipe", "socket", "bytes", "default",
};

static void sentence(int first)
{
    unsigned n = 6 + next(9);
    for (unsigned i = 0; i < n; i++) {
        const char *w = PICK(words);
        if (i == 0) /* capitalised */
            printf("%s%c%s", first ? "" : " ", w[0] >= 'a' ? w[0] - 32 : w[0],
                   w + 1);
        else
            printf(" %s", w);
    }
    putchar(next(6) ? '.' : '?');
}

int main(int argc, char **argv)
{
    long posts = argc > 1 ? strtol(argv[1], NULL, 10) : 300;
    if (posts < 0 || argc > 2) {
        fprintf(stderr, "usage: board-gen [POSTS]\n");
        return 2;
    }
    unsigned minute = 0; /* minutes since 2024-01-01 00:00 */
    for (long i = 0; i < posts; i++) {
        minute += 7 + next(600);
        unsigned day = minute / 1440, month = day / 28, mday = day % 28;
        printf("%s\t%04u-%02u-%02u %02u:%02u\t", PICK(authors),
               2024 + month / 12, month % 12 + 1, mday + 1,
               minute / 60 % 24, minute % 60);
        if (next(20) == 0)
            fputs(PICK(odd_subjects), stdout);
        else
            printf("%s %s", PICK(openers), PICK(topics));
        putchar('\t');
        unsigned sentences = 2 + next(5);
        for (unsigned s = 0; s < sentences; s++)
            sentence(s == 0);
        putchar('\n');
    }
    return ferror(stdout) || fflush(stdout) ? 1 : 0;
}
