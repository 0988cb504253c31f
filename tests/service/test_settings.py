"""Settings from MST_* variables, and the validators that refuse unsafe values."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.settings import Settings


def test_defaults_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert Settings().backend == "auto" and Settings().port == 8000
    monkeypatch.setenv("MST_PORT", "9123")
    monkeypatch.setenv("MST_BACKEND", "cpu")
    monkeypatch.setenv("MST_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MST_GPUS", "0, 2")
    monkeypatch.setenv("MST_MAX_UPLOAD_BYTES", "1000")
    s = Settings()
    assert (s.port, s.backend, s.data_dir, s.gpus, s.max_upload_bytes) == (
        9123,
        "cpu",
        tmp_path,
        [0, 2],
        1000,
    )
    assert s.database_path == tmp_path / "mst.sqlite3" and s.spool_dir == tmp_path / "spool"


@pytest.mark.parametrize("value", ["", "all"])
def test_gpus_all(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MST_GPUS", value)
    assert Settings().gpus is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MST_PORT", "0"),
        ("MST_PORT", "70000"),
        ("MST_BACKEND", "tpu"),
        ("MST_GPUS", "0,0"),
        ("MST_GPUS", "-1"),
        ("MST_GPUS", "a"),
        ("MST_MAX_UPLOAD_BYTES", "0"),
        ("MST_MAX_EDGES", "-5"),
        ("MST_DATA_DIR", "/"),
        ("MST_HEARTBEAT_TIMEOUT_S", "0.5"),
        ("MST_LOG_LEVEL", "loud"),
        ("MST_WORKER_SPIN_MS", "-1"),
        ("MST_WORKER_SPIN_MS", "5000"),
    ],
)
def test_unsafe_values_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


def test_settings_are_frozen() -> None:
    with pytest.raises(ValidationError):
        Settings().port = 1
