"""`specdec serve` as a process: starts on loopback, drains in-flight streams on SIGTERM, and
stops at once on a signal during start-up."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from liveserver import free_port


def test_sigterm_drains_in_flight_stream(tiny_dirs):
    t, d = tiny_dirs
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specdec.cli", "serve", "--target", str(t), "--draft", str(d),
                             "--k", "3", "--port", str(port), "--max-batch", "2", "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.time() + 120
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.time() < end, proc.stdout.read().decode()[-2000:]
            time.sleep(0.2)
        body = {"prompt": "def f(x):", "max_tokens": 300, "temperature": 0, "ignore_eos": True, "stream": True}
        lines = []
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                lines.append(line)
                if len(lines) == 1:
                    proc.send_signal(signal.SIGTERM)       # mid-stream
        assert lines[-1] == "data: [DONE]"
        assert '"finish_reason": "length"' in lines[-2]
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


STOP_WITHIN_S = 2.0    # the bound: a stop signal at any moment of start-up ends the process


def _lines(stream) -> "queue.Queue[str]":
    """The stream's lines as they come, read by a thread (a read blocks)."""
    q: queue.Queue[str] = queue.Queue()

    def pump():
        for raw in iter(stream.readline, b""):
            q.put(raw.decode(errors="replace"))
        q.put("")                                        # end of stream
    threading.Thread(target=pump, daemon=True).start()
    return q


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_while_start_up_measures_ends_it_at_once(tmp_path, sig):
    """An empty cache: building the default engine (k = auto) times its starting costs before the
    server is ready; SIGTERM or SIGINT then ends the process within 2 s, with status 0 (uvicorn
    alone would wait for the start-up to finish). The bundled pair, eager (--no-compile): the
    forwards take long enough to be interrupted."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specdec.cli", "serve", "--method", "ngram", "--no-compile",
                             "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "SPECDEC_CACHE": str(tmp_path)})
    try:
        lines, seen, end = _lines(proc.stderr), [], time.monotonic() + 120
        while not any("specdec: timing" in line for line in seen):
            line = lines.get(timeout=max(0.1, end - time.monotonic()))
            assert line and time.monotonic() < end, "".join(seen)[-2000:]
            seen.append(line)
        proc.send_signal(sig)
        t0 = time.monotonic()
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 30 s after {sig.name}")
        assert time.monotonic() - t0 <= STOP_WITHIN_S and rc == 0
        assert not (tmp_path / "costs").exists() or not list((tmp_path / "costs").glob("*.tmp"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
