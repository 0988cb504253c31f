"""Which workers the supervisor plans, without starting any (and without touching CUDA here)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from service.runtime.supervisor import plan
from service.settings import Settings


def plan_workers(settings: Settings) -> list:
    return plan.plan_workers(settings, settings.data_dir / "run", 1)


def first_config(settings: Settings):
    return plan.first_config(settings, settings.data_dir / "run", 1)


keeps, needs_probe = plan.keeps, plan.needs_probe


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
    # several workers per GPU: each GPU's in turn, each with its share of the device's memory
    configs = plan_workers(Settings(backend="gpu", gpus=[0, 2], workers_per_gpu=3, data_dir=tmp_path))
    assert [c.cuda_device for c in configs] == ["0", "0", "0", "2", "2", "2"]
    assert [c.index for c in configs] == list(range(6)) and {c.memory_share for c in configs} == {3}
    assert len({c.socket_path for c in configs}) == 6
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


def test_worker_0_starts_before_the_plan_as_the_plan_will_have_it(tmp_path, monkeypatch) -> None:
    """The head start spawns worker 0 before the probe answers: its config is the plan's where the
    plan needs no probe, else ``auto``/``gpu`` on the first GPU the plan can name, kept only where
    the plan's worker 0 is that one (service/runtime/supervisor/plan.py)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cpu = Settings(backend="cpu", cpu_workers=2, data_dir=tmp_path)
    assert not needs_probe(cpu) and first_config(cpu) == plan_workers(cpu)[0]
    listed = Settings(backend="gpu", gpus=[2, 0], data_dir=tmp_path)
    assert not needs_probe(listed) and first_config(listed) == plan_workers(listed)[0]
    assert (first_config(listed).backend, first_config(listed).cuda_device) == ("gpu", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaa,GPU-bbb")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(  # CuPy "is installed" (auto probes only then; gpu always does)
        importlib.util, "find_spec", lambda name, *a: object() if name == "cupy" else real(name, *a)
    )
    for backend in ("auto", "gpu"):
        probed = Settings(backend=backend, data_dir=tmp_path)
        early = first_config(probed)
        assert (early.index, early.backend, early.cuda_device) == (0, backend, "GPU-aaa")
    auto = first_config(Settings(backend="auto", data_dir=tmp_path))
    on = lambda device: replace(auto, backend="gpu", cuda_device=device)  # noqa: E731
    assert keeps(on("GPU-aaa"), auto) and not keeps(on("GPU-bbb"), auto)
    assert keeps(replace(auto, backend="cpu", cuda_device=None), auto)  # auto resolves to the CPU too
    gpu = first_config(Settings(backend="gpu", data_dir=tmp_path))
    assert keeps(replace(gpu), gpu) and not keeps(replace(gpu, cuda_device="GPU-bbb"), gpu)
    assert not keeps(replace(gpu, backend="cpu", cuda_device=None), gpu)
