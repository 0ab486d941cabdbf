"""A ``dmocker serve`` process for the tests: started on 127.0.0.1 on free ports, stopped with
SIGTERM, its outputs read back.  It stops by itself after 90 s if a test fails to stop it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]


class Server:
    def __init__(self, tmp: Path, *flags: str) -> None:
        self.out, self.records, self.events = tmp / "summary.json", tmp / "records.jsonl", tmp / "events.jsonl"
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dmocker", "serve", "--port", "0", "--stop-after-s", "90",
             "--out", str(self.out), "--per-request", str(self.records), "--events", str(self.events), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on" in line, line + (self.proc.stderr.read() if self.proc.stderr else "")
        self.where = line.split("listening on", 1)[1].strip()
        self.url = self.where

    def drive(self, traffic: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        """Run ``traffic`` against the server, stop it (SIGTERM) and check it exited 0."""
        try:
            result = asyncio.run(asyncio.wait_for(traffic, timeout=timeout))
        finally:
            code, output = self.stop()
        assert code == 0, output
        return result

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out + err

    def summary(self) -> dict[str, object]:
        data = json.loads(self.out.read_text())
        assert isinstance(data, dict)
        return data["summary"]  # type: ignore[no-any-return]
