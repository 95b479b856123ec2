/* Helpers shared by the library's source files; not part of the API. */
#ifndef TGW_INTERNAL_H
#define TGW_INTERNAL_H

#include <sys/uio.h>

#include "tern_gw.h"

/* Write every byte described by iov[0..cnt) to fd, resuming after short
 * writes, EINTR and EAGAIN.  iov is consumed (modified).  0 or -1. */
int tgw__writev_all(int fd, struct iovec *iov, int cnt);

/* Block until fd is writable (used after EAGAIN on a non-blocking fd).
 * 0 or -1. */
int tgw__wait_writable(int fd);

/* Mark the stream failed with errno (if not already) and return -1. */
int tgw__fail(tgw_out *out);

#endif
