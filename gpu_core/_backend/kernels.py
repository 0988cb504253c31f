"""Loads the CUDA kernels: one compilation per device, file and process, never on a request path."""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

KERNEL_FILE = "ecl_mst.cu"
#: templated kernels, instantiated through NVRTC name expressions
#: the slot index types (``_graphs.layout.SlotLayout.slot``): 32-bit graphs and 64-bit ones
SLOT_TYPES: tuple[str, ...] = ("int", "long long")
NAME_EXPRESSIONS: tuple[str, ...] = (
    *(f"init_worklist<{phase}, {slot}>" for phase in ("false", "true") for slot in SLOT_TYPES),
    *(
        f"{name}<{slot}>"
        for name in ("select_lightest", "link_lightest", "assign_ranks", "partition_rows", "write_slots")
        for slot in SLOT_TYPES
    ),
    *(f"rank_keys<{weight}, {ids}>" for weight in ("float", "int") for ids in SLOT_TYPES),
    *(f"gather_ids<{ids}>" for ids in SLOT_TYPES),
    "take_by_u32<unsigned char>",
    "take_by_u32<unsigned>",
    "gather_weights<unsigned>",
    "gather_weights<unsigned long long>",
)
#: the build of KERNEL_FILE whose ``link_lightest`` can end a loop of the run's CUDA graph on the
#: device (``cudaGraphSetConditional``, :mod:`.device_loops`): a symbol the driver resolves when it
#: loads a module and drivers before CUDA 12.4 lack, so only graphs that run on the device's loops
#: load this build, and everything else (the host's loop included) the plain one
LOOPS_NAME_EXPRESSIONS: tuple[str, ...] = tuple(f"link_lightest<{slot}>" for slot in SLOT_TYPES)
LOOPS_OPTIONS: tuple[str, ...] = ("-std=c++17", "-DMST_DEVICE_LOOPS=1")
#: the point-set kernels (Euclidean and mutual-reachability trees)
EMST_FILE = "emst.cu"
#: points per leaf of the point hierarchy (kLeaf in emst.cu): one point per leaf, as ArborX has it,
#: was faster than 2, 4, 8 or 16 on many points
EMST_LEAF = 1
#: neighbours per point in the Euclidean tree's lists (EMST_LIST in emst.cu)
EMST_LIST = 8
EMST_NAME_EXPRESSIONS: tuple[str, ...] = (
    *(
        f"{kernel}<{dims}, {arg}>"
        for dims in (0, 1, 2, 3)
        for kernel, args in (
            ("nearest_outside", ("false", "true")),
            ("core_distances", ("8, false", "16, false", "32, false", "64, false", f"{EMST_LIST}, true")),
        )
        for arg in args
    ),
    f"neighbour_edges<{EMST_LIST}, false>",
    f"neighbour_edges<{EMST_LIST}, true>",
    # the neighbour lists of query points (HDBSCAN*'s prediction), all but the one above
    *(
        f"core_distances<{dims}, {size}, true>"
        for dims in (0, 1, 2, 3)
        for size in (8, 16, 32, 64)
        if size != EMST_LIST
    ),
)
#: the single-linkage dendrogram kernels (plain extern "C" kernels: no name expressions)
DENDROGRAM_FILE = "dendrogram.cu"
#: HDBSCAN*'s segment reductions (the condensed tree's stabilities and deaths, on the device)
HDBSCAN_FILE = "hdbscan_tree.cu"
#: the brute-force searches of points of many coordinates (plain extern "C" kernels)
BRUTE_FILE = "brute.cu"
#: the brute-force searches' products on Hopper's wgmma (built for sm_90a alone: :data:`SM90A_FILES`)
BRUTE_WGMMA_FILE = "brute_wgmma.cu"
#: the metrics' device arithmetic: unit vectors, distances of keys, exact Minkowski key tiles
METRICS_FILE = "metrics.cu"
#: HDBSCAN* of precomputed dense distance matrices: core distances by row and Borůvka over rows
PRECOMPUTED_FILE = "precomputed.cu"
#: per file: name expressions and NVRTC options (no FMA contraction in the exact point kernels)
FILES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    KERNEL_FILE: (NAME_EXPRESSIONS, ("-std=c++17",)),
    EMST_FILE: (
        EMST_NAME_EXPRESSIONS,
        ("-std=c++17", "--fmad=false", f"-DEMST_LEAF={EMST_LEAF}", f"-DEMST_LIST={EMST_LIST}"),
    ),
    DENDROGRAM_FILE: ((), ("-std=c++17",)),
    HDBSCAN_FILE: ((), ("-std=c++17", "--fmad=false")),
    BRUTE_FILE: ((), ("-std=c++17", "--fmad=false")),
    BRUTE_WGMMA_FILE: ((), ("-std=c++17", "--fmad=false")),
    METRICS_FILE: ((), ("-std=c++17", "--fmad=false")),
    PRECOMPUTED_FILE: ((), ("-std=c++17", "--fmad=false")),
}
#: files of instructions only compute capability 9.0 has (wgmma: the sm_90a target), built for it
#: by NVRTC directly (:func:`_sm90a_module`): CuPy names the device's plain architecture itself
SM90A_FILES = frozenset({BRUTE_WGMMA_FILE})
#: builds of a file with other options, by name: emst.cu's manhattan, chebyshev and minkowski keys
#: (the metric chosen at run time within this build; the Euclidean build stays as it is)
VARIANTS: dict[tuple[str, str], tuple[str, ...]] = {(EMST_FILE, "minkowski"): ("-DEMST_MINKOWSKI=1",)}


def kernel_source(name: str = KERNEL_FILE) -> str:
    """A ``.cu`` file of ``gpu_core/kernels``, with a ``#line`` so NVRTC errors name the file; its
    ``#include "x.cuh"`` lines of the same folder are replaced by those files (with their own
    ``#line``), so NVRTC needs no include path."""
    text = resources.files("gpu_core").joinpath("kernels", name).read_text(encoding="utf-8")
    lines = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith('#include "') and line.rstrip().endswith('.cuh"'):
            header = line.split('"')[1]
            body = resources.files("gpu_core").joinpath("kernels", header).read_text(encoding="utf-8")
            lines += [f'#line 1 "{header}"', body, f'#line {number + 1} "{name}"']
        else:
            lines.append(line)
    return f'#line 1 "{name}"\n' + "\n".join(lines) + "\n"


@functools.cache
def _module(device_id: int, file: str = KERNEL_FILE, loops: bool = False, variant: str = "") -> Any:
    import cupy

    if file in SM90A_FILES:
        return _sm90a_module(device_id, file)
    name_expressions, options = (LOOPS_NAME_EXPRESSIONS, LOOPS_OPTIONS) if loops else FILES[file]
    if variant:
        options = (*options, *VARIANTS[(file, variant)])
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(
            code=kernel_source(file), options=options, name_expressions=name_expressions or None
        )
        module.compile()
    return module


def _sm90a_module(device_id: int, file: str) -> Any:
    """``file`` built by NVRTC for sm_90a, its machine code kept in CuPy's kernel cache folder
    (``CUPY_CACHE_DIR``) under a hash of the source, the options and NVRTC's version."""
    import cupy
    from cupy_backends.cuda.libs import nvrtc

    source = kernel_source(file)
    options = (*FILES[file][1], "--gpu-architecture=sm_90a")
    key = hashlib.sha256(repr((source, options, nvrtc.getVersion())).encode()).hexdigest()[:40]
    folder = Path(os.environ.get("CUPY_CACHE_DIR") or Path.home() / ".cupy" / "kernel_cache")
    path = folder / f"{Path(file).stem}_sm90a_{key}.cubin"
    if not path.exists():
        program = nvrtc.createProgram(source, file, (), ())
        try:
            try:
                nvrtc.compileProgram(program, options)
            except nvrtc.NVRTCError as error:
                raise RuntimeError(
                    f"NVRTC could not build {file}:\n{nvrtc.getProgramLog(program)}"
                ) from error
            cubin = nvrtc.getCUBIN(program)
        finally:
            nvrtc.destroyProgram(program)
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, delete=False) as out:  # whole, or not at all
            out.write(cubin)
        os.replace(out.name, path)
    with cupy.cuda.Device(device_id):
        return cupy.RawModule(path=str(path))


def kernel(name: str, file: str = KERNEL_FILE, *, loops: bool = False, variant: str = "") -> Any:
    """The compiled kernel ``name`` (a ``cupy.RawKernel``) of ``file`` for the current device.

    ``loops``: ``link_lightest`` from the build that ends device loops (:data:`LOOPS_OPTIONS`);
    ``variant``: a build of :data:`VARIANTS`.
    """
    if loops and (file != KERNEL_FILE or name not in LOOPS_NAME_EXPRESSIONS):
        raise ValueError(f"{name} of {file} has no device-loop build")
    import cupy

    return _module(cupy.cuda.Device().id, file, loops, variant).get_function(name)
