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
        ("MST_RESULT_DIR", "/"),
        ("MST_HEARTBEAT_TIMEOUT_S", "0.5"),
        ("MST_LOG_LEVEL", "loud"),
        ("MST_WORKER_SPIN_MS", "-1"),
        ("MST_WORKER_SPIN_MS", "5000"),
        ("MST_STANDBY_WORKER", "maybe"),
    ],
)
def test_unsafe_values_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


def test_the_result_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MST_DATA_DIR", str(tmp_path / "data"))
    assert Settings().results_dir == tmp_path / "data" / "spool" / "results"
    monkeypatch.setenv("MST_RESULT_DIR", str(tmp_path / "fast"))
    assert Settings().results_dir == tmp_path / "fast"
    for inside in ("", "spool", "spool/graphs", "spool/tmp/x"):  # the data dir's own folders: refused
        monkeypatch.setenv("MST_RESULT_DIR", str(tmp_path / "data" / inside))
        with pytest.raises(ValidationError, match="give the result files a folder of their own"):
            Settings()
    monkeypatch.setenv("MST_RESULT_DIR", str(tmp_path))  # holds the data dir
    with pytest.raises(ValidationError, match="holds MST_DATA_DIR"):
        Settings()
    monkeypatch.setenv("MST_RESULT_DIR", str(tmp_path / "data" / "results"))  # a folder of its own there
    assert Settings().results_dir == tmp_path / "data" / "results"
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("MST_RESULT_DIR", str(tmp_path / "file"))
    with pytest.raises(ValidationError, match=r"MST_RESULT_DIR .* is a file, not a folder"):
        Settings()


def test_settings_are_frozen() -> None:
    with pytest.raises(ValidationError):
        Settings().port = 1


def test_api_keys_are_off_by_default_and_split_on_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings()
    assert s.api_keys == [] and s.api_keys_file is None
    assert (s.quota_graphs, s.quota_device_bytes, s.quota_queued_jobs, s.max_queued_jobs) == (0, 0, 0, 10_000)
    monkeypatch.setenv("MST_API_KEYS", " key-one-0123456789 , key-two-0123456789 ")
    keys = Settings().api_keys
    assert [k.get_secret_value() for k in keys] == ["key-one-0123456789", "key-two-0123456789"]
    assert "key-one" not in repr(Settings())  # secrets stay out of reprs and logs


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("key-one-0123456789,,key-two-0123456789", "key 2 of MST_API_KEYS is empty"),
        ("short-key", "at least 16"),
        ("key one 0123456789", "visible ASCII"),
        ("key-\u00e9-0123456789abc", "visible ASCII"),
    ],
)
def test_bad_api_keys_are_refused(monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    monkeypatch.setenv("MST_API_KEYS", value)
    with pytest.raises(ValidationError, match=message):
        Settings()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "holds no key"),
        ("# only a comment\n", "holds no key"),
        ("abc123 team\n", "line 1: expected '<sha256-hex> \\[owner\\]'"),
        ("# ok\n" + "a" * 64 + " team one\n", "line 2"),
        ("a" * 64 + " t\u00e9am\n", "line 1"),
    ],
)
def test_bad_key_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "keys"
    path.write_text(text)
    with pytest.raises(ValidationError, match=message):
        Settings(api_keys_file=path)


def test_a_missing_key_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cannot be read"):
        Settings(api_keys_file=tmp_path / "nope")


def test_a_good_key_file(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# keys\n" + "a" * 64 + "\n" + "B" * 64 + "  team-b   # rotated\n")
    assert Settings(api_keys_file=path).api_keys_file == path
