#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "tgw_internal.h"

int tgw__wait_writable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    for (;;) {
        int r = poll(&p, 1, -1);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

int tgw__writev_all(int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        if (iov->iov_len == 0) {
            iov++, cnt--;
            continue;
        }
        /* A single piece goes through write(): the exact-buffer disciplines
         * are defined as one write() per buffer, and that is what gets
         * measured. */
        ssize_t w = cnt == 1 ? write(fd, iov->iov_base, iov->iov_len)
                             : writev(fd, iov, cnt);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (tgw__wait_writable(fd))
                    return -1;
                continue;
            }
            return -1;
        }
        if (w == 0) { /* no progress on a non-empty write: never spin */
            errno = EIO;
            return -1;
        }
        size_t done = (size_t)w;
        while (cnt > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++, cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}
