"""`specdec serve` as a process: starts on loopback, and drains in-flight streams on SIGTERM."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

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
