"""Which workers the supervisor plans, without starting any (and without touching CUDA here)."""

from __future__ import annotations

import pytest

from service.runtime.pool.local_pool import plan_workers
from service.settings import Settings


def test_cpu_backend_plans_one_cpu_worker(tmp_path) -> None:
    [config] = plan_workers(Settings(backend="cpu", data_dir=tmp_path))
    assert (config.backend, config.cuda_device, config.index) == ("cpu", None, 0)
    assert config.tmp_dir == str(tmp_path / "spool" / "tmp")


def test_cpu_workers_plans_that_many_cpu_workers(tmp_path) -> None:
    configs = plan_workers(Settings(backend="cpu", cpu_workers=3, data_dir=tmp_path))
    assert [(c.index, c.backend, c.cuda_device) for c in configs] == [(i, "cpu", None) for i in range(3)]
    with pytest.raises(ValueError, match="cpu_workers"):
        Settings(backend="cpu", cpu_workers=0, data_dir=tmp_path)


def test_one_worker_per_listed_gpu(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    configs = plan_workers(Settings(backend="gpu", gpus=[0, 2], data_dir=tmp_path))
    assert [(c.index, c.backend, c.cuda_device) for c in configs] == [(0, "gpu", "0"), (1, "gpu", "2")]
    # ordinals are positions in an inherited CUDA_VISIBLE_DEVICES
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaa,GPU-bbb,GPU-ccc")
    configs = plan_workers(Settings(backend="gpu", gpus=[1, 2], data_dir=tmp_path))
    assert [c.cuda_device for c in configs] == ["GPU-bbb", "GPU-ccc"]


def test_auto_without_cupy_is_cpu_without_a_probe(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    fake = lambda name, *a: None if name == "cupy" else real(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", fake)
    [config] = plan_workers(Settings(backend="auto", data_dir=tmp_path))
    assert config.backend == "cpu"
