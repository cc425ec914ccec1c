"""How busy the machine is: other processes' CPU use, read from /proc directly.

The 1-minute load average lags, and it counts this process too: right after two threads of
timing on a 2-core machine it reads about 2, although nobody else ran. So other processes'
use is read from the kernel's tick counters instead (Linux's /proc/stat and /proc/self/stat;
elsewhere only the load average is known): over a timed window as the system's busy ticks
minus this process's own (`snapshot`, `others_busy`: cost tables, costs/cache.py), or over a
short window in which this process sleeps (`busy_cores`, `busy_now`: before an analysis,
analysis/machine_load.py, and when a busy-marked table is read).
"""
from __future__ import annotations

import os
import time

WINDOW_S = 0.5      # how long the direct sample watches: long enough for a busy loop to show fully
HELD = 0.5          # a core counts as taken when other processes use more than half of it
MIN_TICKS = 50      # the least window others_busy reads from its ticks (0.25 s of 2 CPUs at 100 Hz):
                    # in a few-ms window one tick of any other process reads as a whole core
NOW_S = 0.2         # busy_now's window, paid when a busy-marked table is read: 20 ticks of a
                    # 100 Hz clock per CPU still show a busy loop whole


def load_average() -> float | None:
    """The 1-minute load average (None where the OS does not report one)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs from /proc/stat, or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)          # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_cores(window_s: float = WINDOW_S) -> float | None:
    """Cores in use by other processes, sampled over `window_s` while this one sleeps; the
    load average where /proc/stat is missing (None if neither is known)."""
    a = _cpu_times()
    if a is None:
        return load_average()
    time.sleep(window_s)
    b = _cpu_times()
    if b is None or b[1] == a[1]:
        return load_average()
    return (b[0] - a[0]) / (b[1] - a[1]) * (os.cpu_count() or 1)


def _own_ticks() -> int | None:
    """This process's user + system clock ticks (all its threads), from /proc/self/stat."""
    try:
        fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None


def snapshot() -> tuple[int, int, int] | None:
    """(system busy ticks, total ticks, own ticks) now, to pass to `others_busy` later."""
    sys_, own = _cpu_times(), _own_ticks()
    return None if sys_ is None or own is None else (*sys_, own)


def others_busy(since: tuple[int, int, int] | None) -> bool:
    """Other processes held a core (more than HELD of it) since `since`: the system's busy time
    minus this process's own, over the window; busy_now() where that cannot be read, or the
    window is too short to tell (MIN_TICKS)."""
    now = snapshot()
    if since is None or now is None or now[1] - since[1] < MIN_TICKS:
        return busy_now()
    others = (now[0] - since[0]) - (now[2] - since[2])
    return others / (now[1] - since[1]) * (os.cpu_count() or 1) > HELD


def busy_now(window_s: float = NOW_S) -> bool:
    """Other processes hold a core (more than HELD of it) now; without /proc/stat, the load
    average exceeds the cores (this process's own threads count there)."""
    if _cpu_times() is None:
        load = load_average()
        return load is not None and load > (os.cpu_count() or 1)
    busy = busy_cores(window_s)
    return busy is not None and busy > HELD
