/* The peer of the loopback references: a TCP listener on 127.0.0.1 (any
 * port), served by a thread (as tern's loopback peer is) or by a forked
 * child process, as PEER ("thread" or "process") says. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct peer {
    int threaded;
    pid_t child;
    pthread_t thread;
};

/* A listener with room for `backlog` connections, its address in *addr;
 * -1 (said on stderr) when there is none. */
static int peer_listen(struct sockaddr_in *addr, int backlog) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    *addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof *addr;
    if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof *addr) || listen(fd, backlog) ||
        getsockname(fd, (struct sockaddr *)addr, &alen)) {
        perror("listen");
        return -1;
    }
    return fd;
}

/* Runs `serve` in a thread or a child, as `kind` says; 0, else -1. */
static int peer_start(struct peer *p, const char *kind, void *(*serve)(void *)) {
    p->threaded = strcmp(kind, "thread") == 0;
    if (!p->threaded && strcmp(kind, "process") != 0)
        return -1;
    if (p->threaded)
        return pthread_create(&p->thread, NULL, serve, NULL) ? -1 : 0;
    if ((p->child = fork()) == 0) {
        serve(NULL);
        _exit(0);
    }
    return p->child < 0 ? -1 : 0;
}
