"""The CUDA kernels shipped in ``gpu_core/kernels`` compile with nvcc for sm_80 and sm_90.

No GPU is needed, only nvcc (it is on the CI machine). The kernels are compiled at
run time by NVRTC; this catches syntax and template errors before a GPU host does.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import gpu_core

KERNELS = Path(gpu_core.__file__).parent / "kernels"
GPU_BACKEND = Path(gpu_core.__file__).parent / "_graphs" / "gpu.py"
ARCHS = ["sm_80", "sm_90"]
#: Both with the optimisers off: the front end's diagnostics (what --Werror turns into errors) and
#: the template instantiations do not depend on them, and ptxas still allocates the code for each
#: architecture, in a third of the CPU (emst.cu 14 s -> 4 s on CI's machine). The optimised build is
#: NVRTC's, at run time on the GPU hosts (the ``gpu`` tests).
OPTIMISERS_OFF = ("-Xcicc", "-O0", "-Xptxas", "-O0")


def kernel_files() -> list[Path]:
    return sorted(KERNELS.glob("*.cu"))


def builds() -> list[tuple[Path, str]]:
    """Each kernel file with each architecture it is built for: :data:`ARCHS`, or sm_90a alone
    for the files of instructions only compute capability 9.0 has (``SM90A_FILES``)."""
    from gpu_core._backend.kernels import SM90A_FILES

    return [
        (source, arch)
        for source in kernel_files()
        for arch in (["sm_90a"] if source.name in SM90A_FILES else ARCHS)
    ]


def test_kernel_files_exist_once_the_gpu_backend_does() -> None:
    if not GPU_BACKEND.exists():
        pytest.skip("the GPU backend (gpu_core/_graphs/gpu.py) does not exist yet")
    assert kernel_files(), f"no .cu files under {KERNELS}"


@pytest.mark.slow
@pytest.mark.parametrize(("source", "arch"), builds(), ids=lambda x: x.name if isinstance(x, Path) else x)
def test_kernel_compiles_with_nvcc(source: Path, arch: str, tmp_path: Path) -> None:
    """Each kernel for each architecture on its own (so parallel test processes share them out), every
    warning an error, as CI's nvcc step did before this test took it over. sm_90a is named in the
    -gencode form (nvcc 13.0's -arch=sm_90a also runs a plain sm_90 pass, which rejects wgmma)."""
    out = tmp_path / f"{source.stem}.{arch}.cubin"
    target = f"-gencode=arch=compute_{arch[3:]},code={arch}" if arch.endswith("a") else f"-arch={arch}"
    _nvcc(source, out, "-std=c++17", target, *OPTIMISERS_OFF, "--Werror", "all-warnings", "-cubin")
    assert out.stat().st_size > 0


@pytest.mark.slow
def test_the_sm90a_files_refuse_any_other_target(tmp_path: Path) -> None:
    """A wgmma file built for plain sm_90 stops at its own #error, not deep in ptxas."""
    from gpu_core._backend.kernels import SM90A_FILES

    for name in SM90A_FILES:
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            pytest.skip("nvcc is not on PATH")
        cmd = [
            nvcc,
            "-std=c++17",
            "-arch=sm_90",
            "-cubin",
            "-I",
            str(KERNELS),
            "-o",
            str(tmp_path / "x.cubin"),
        ]
        proc = subprocess.run([*cmd, str(KERNELS / name)], capture_output=True, text=True, timeout=240)
        assert proc.returncode != 0 and "needs the sm_90a target" in proc.stderr + proc.stdout, name


def _nvcc(source: Path, out: Path, *options: str) -> None:
    """nvcc ``options`` on ``source`` (the kernels' folder on the include path) into ``out``."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    cmd = [nvcc, *options, "-I", str(KERNELS), "-o", str(out), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


def _ptx(source: Path, options: tuple[str, ...], tmp_path: Path) -> str:
    out = tmp_path / f"{source.stem}.{len(options)}.ptx"
    _nvcc(source, out, *options, "-arch=sm_90", "-ptx")
    return out.read_text()


@pytest.mark.slow
def test_only_the_device_loop_build_needs_the_drivers_conditional_nodes(tmp_path: Path) -> None:
    """``cudaGraphSetConditional`` is a symbol the driver resolves when it loads a module, and
    drivers before CUDA 12.4 lack it: a module that names it fails to load there. Only the build
    that graphs running on the device's loops load may name it; the plain build (every other
    kernel, and the host's loop) must not, or no graph could be built on those drivers."""
    from gpu_core._backend.kernels import FILES, KERNEL_FILE, LOOPS_OPTIONS

    source = KERNELS / KERNEL_FILE
    symbol = ".extern .func cudaGraphSetConditional"
    assert symbol not in _ptx(source, FILES[KERNEL_FILE][1], tmp_path)
    assert symbol in _ptx(source, LOOPS_OPTIONS, tmp_path)


def test_the_gpu_backend_has_kernels_to_compile() -> None:
    if GPU_BACKEND.exists():
        assert kernel_files(), f"the GPU backend exists but there are no .cu files under {KERNELS}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "options"),
    [
        ("emst.cu", ("-DEMST_MINKOWSKI=1",)),
        ("metrics.cu", ()),
        ("precomputed.cu", ()),
        ("brute.cu", ()),
        ("brute_wgmma.cu", ()),
    ],
    ids=["emst-minkowski", "metrics", "precomputed", "brute", "brute-wgmma"],
)
def test_nvrtcs_source_compiles_as_the_loader_gives_it(
    source: str, options: tuple[str, ...], tmp_path: Path
) -> None:
    """What NVRTC compiles: the loader's text (``#include "x.cuh"`` inlined) with the file's options
    and each build of :data:`VARIANTS` (emst.cu's minkowski keys), every warning an error."""
    from gpu_core._backend.kernels import FILES, kernel_source

    text = tmp_path / source
    text.write_text(kernel_source(source), encoding="utf-8")
    names, file_options = FILES[source]
    del names
    out = tmp_path / f"{source}.cubin"
    from gpu_core._backend.kernels import SM90A_FILES

    _nvcc(
        text,
        out,
        *file_options,
        *options,
        "-gencode=arch=compute_90a,code=sm_90a" if source in SM90A_FILES else "-arch=sm_90",
        *OPTIMISERS_OFF,
        "--Werror",
        "all-warnings",
        "-cubin",
    )
    assert out.stat().st_size > 0
