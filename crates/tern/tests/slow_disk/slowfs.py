#!/usr/bin/python3
"""A slow disk for tests: mirrors BACKING at MOUNTPOINT (read-only), and
every read of a file whose name starts with "slow" sleeps DELAY seconds.

Slow files are opened with FUSE's direct_io, so the kernel keeps none of
their pages: every read (the server's, the test's) reaches this process
and is slow, however often the file was read before. Other files use the
page cache as on any disk. Runs in the foreground until unmounted
(`fusermount -u MOUNTPOINT`) or killed.

usage: slowfs.py BACKING MOUNTPOINT DELAY
"""

import errno
import os
import sys
import time

try:
    import fusepy as fuse  # Debian's python3-fusepy
except ImportError:
    import fuse


class SlowFs(fuse.Operations):
    def __init__(self, backing, delay):
        self.backing = backing
        self.delay = delay

    def _path(self, path):
        return os.path.join(self.backing, path.lstrip("/"))

    def getattr(self, path, fh=None):
        try:
            st = os.lstat(self._path(path))
        except OSError as e:
            raise fuse.FuseOSError(e.errno)
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime", "st_ctime")
        attrs = {k: getattr(st, k) for k in keys}
        attrs["st_ino"] = st.st_ino
        return attrs

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._path(path))

    def open(self, path, fi):
        if fi.flags & (os.O_WRONLY | os.O_RDWR):
            raise fuse.FuseOSError(errno.EROFS)
        fi.fh = os.open(self._path(path), os.O_RDONLY)
        fi.direct_io = os.path.basename(path).startswith("slow")
        return 0

    def read(self, path, size, offset, fi):
        if os.path.basename(path).startswith("slow"):
            time.sleep(self.delay)
        return os.pread(fi.fh, size, offset)

    def release(self, path, fi):
        os.close(fi.fh)
        return 0


def main():
    backing, mountpoint, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    fuse.FUSE(SlowFs(backing, delay), mountpoint, foreground=True, nothreads=False, ro=True, raw_fi=True)


if __name__ == "__main__":
    main()
