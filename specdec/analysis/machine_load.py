"""How busy the machine is before an analysis starts, and how many threads that leaves it.

The 1-minute load average lags: a competing process started seconds before the analysis
does not show in it. So the cores other processes use are also sampled directly, over a
short window in which this process sleeps (Linux's /proc/stat; elsewhere only the load
average is known). A forward on 2 OpenMP threads with one core taken by another process
waits at every barrier for the thread that shares that core: in a quick analysis with a
Python busy loop on one of 2 cores, every cell's 95% interval stayed wider than +-10%
(median half-width 37%), so the analysis then runs on the cores that are free.
"""
from __future__ import annotations

import os
import time

BUSY = 0.5          # cores in use per CPU above which the machine is busy (half the cores taken)
WINDOW_S = 0.5      # how long the direct sample watches: long enough for a busy loop to show fully
HELD = 0.5          # a core counts as taken when other processes use more than half of it


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


def free_threads(busy: float | None, cpus: int | None, current: int) -> int:
    """Threads for the analysis: `current`, capped at the cores others do not hold."""
    if busy is None or not cpus:
        return current
    taken = int(busy + (1 - HELD))                  # round, counting a core taken above HELD
    return max(1, min(current, cpus - taken))


def busy_warning(load: float | None, cpus: int | None) -> str:
    """A warning line when the cores in use before the analysis starts (the larger of the
    load average and the direct sample) exceed BUSY per CPU; "" otherwise."""
    if load is None or not cpus or load <= BUSY * cpus:
        return ""
    return (f"warning: the machine is busy ({load:.1f} of {cpus} CPUs in use before the analysis "
            "started): timings will be noisy; cells whose interval stays wide are marked uncertain")
