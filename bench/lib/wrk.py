"""Reading wrk's output: the one parser the benchmark reports share."""

import re

# wrk prints binary units (base 1024) and times in us/ms/s/m/h.
_BYTES = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
_TIME_US = {"us": 1.0, "ms": 1e3, "s": 1e6, "m": 60e6, "h": 3600e6}


def time_us(text):
    """A wrk time ("1.23ms") in microseconds, or None."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text)
    return float(m.group(1)) * _TIME_US[m.group(2)] if m else None


def parse(path):
    """The numbers of one wrk output file: None where absent; `problems`
    lists what wrk complained about (an unreadable file included)."""
    out = {"requests": None, "wrk_seconds": None, "rps": None, "transfer_bytes_per_s": None,
           "p50_us": None, "p90_us": None, "p99_us": None, "max_us": None,
           "socket_errors": {"connect": 0, "read": 0, "write": 0, "timeout": 0},
           "non_2xx_3xx": 0, "problems": []}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        out["problems"].append(str(e))
        return out
    m = re.search(r"^\s*(\d+) requests in ([\d.]+\w+), ", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
        seconds = time_us(m.group(2))
        out["wrk_seconds"] = seconds / 1e6 if seconds is not None else None
    m = re.search(r"^Requests/sec:\s*([\d.]+)", text, re.M)
    if m:
        out["rps"] = float(m.group(1))
    m = re.search(r"^Transfer/sec:\s*([\d.]+)(\w+)", text, re.M)
    if m:
        out["transfer_bytes_per_s"] = float(m.group(1)) * _BYTES.get(m.group(2), 1)
    for pct in ("50", "90", "99"):
        m = re.search(rf"^\s*{pct}%\s+([\d.]+\w+)", text, re.M)
        if m:
            out[f"p{pct}_us"] = time_us(m.group(1))
    m = re.search(r"^\s+Latency\s+\S+\s+\S+\s+(\S+)", text, re.M)
    if m:
        out["max_us"] = time_us(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["socket_errors"] = dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups())))
    m = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text)
    if m:
        out["non_2xx_3xx"] = int(m.group(1))
    for line in text.splitlines():
        if line.startswith("wrk exited") or "unable to connect" in line:
            out["problems"].append(line.strip())
    if out["rps"] is None:
        out["problems"].append("no Requests/sec line")
    return out


def errors(w):
    """Socket errors and non-2xx/3xx responses together."""
    return sum(w["socket_errors"].values()) + w["non_2xx_3xx"]
