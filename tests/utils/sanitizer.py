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


#: a racecheck hazard: the two accesses' kernels
_HAZARD = re.compile(
    r"Race reported between \w+ access at (\w+)\+0x[0-9a-f]+\s*=*\s*and \w+ access at (\w+)\+"
)
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards displayed \((\d+) errors, (\d+) warnings\)")


def assert_clean_under_sanitizer(
    tool: str, script: str, timeout: float = 280, ignore_kernels: tuple[str, ...] = ()
) -> None:
    """Run ``script`` (which prints ``sanitized ok`` at its end) under ``tool``: no error, no hazard.

    ``ignore_kernels``: library kernels (not this project's) whose racecheck *warnings* are let
    pass, each named exactly; any error, and any hazard in another kernel, still fails.
    """
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH")
    cmd = [sanitizer, f"--tool={tool}", "--error-exitcode=99", sys.executable, "-c", script]
    if tool == "memcheck":
        cmd[2:2] = ["--leak-check=no"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert "sanitized ok" in proc.stdout, output[-6000:]
    if re.search(r"SUMMARY: 0 (errors|hazards)", output) and proc.returncode == 0:
        return
    summary = _RACE_SUMMARY.search(output)
    hazards = _HAZARD.findall(output)
    excused = (
        tool == "racecheck"
        and summary is not None
        and summary.group(2) == "0"
        and bool(hazards)
        and all(kernel in ignore_kernels for pair in hazards for kernel in pair)
        and len(hazards) == int(summary.group(1))
    )
    assert excused, output[-6000:]
