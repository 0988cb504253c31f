"""Running a Python script under NVIDIA's ``compute-sanitizer`` (memcheck, racecheck) for the tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def assert_clean_under_sanitizer(tool: str, script: str, timeout: float = 280) -> None:
    """Run ``script`` (which prints ``sanitized ok`` at its end) under ``tool``: no error, no hazard."""
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH")
    cmd = [sanitizer, f"--tool={tool}", "--error-exitcode=99", sys.executable, "-c", script]
    if tool == "memcheck":
        cmd[2:2] = ["--leak-check=no"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert "sanitized ok" in proc.stdout
    assert re.search(r"SUMMARY: 0 (errors|hazards)", output), output[-6000:]
