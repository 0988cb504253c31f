"""Which CuPy modules some work makes this process build or load: the warm-up's record of itself.

Every elementwise, reduction, scan and raw kernel CuPy launches for the first time in a process
(for its dtypes, ndim and, for some, the size class of its input) goes through
``cupy.cuda.compiler._compile_module_with_cache``: it generates the module's source, reads the
compiled module from the kernel cache (``CUPY_CACHE_DIR``) or compiles it with NVRTC and writes it
there, then loads it into the CUDA context. Later launches of the same kernel hit CuPy's own
in-memory caches and never come back here. :func:`kernel_census` wraps that function while a piece
of work runs and names each module it built or loaded by a hash of the call's arguments as CuPy
passes them (the source, options, architecture, name expressions): the same name in every process
of one installation, whatever the order, and through any wrapper that passes them on unchanged
(a test's counter). It also counts NVRTC's programs: ``compiled`` (a kernel's source:
a cache miss) and ``probes`` (the empty program CuPy compiles once per set of options to learn the
compiler's version, even when every module is in the cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: arguments of ``_compile_module_with_cache`` that do not name the module (a log stream's repr
#: holds its address; CuPy passes every argument after ``options`` by keyword)
_NOT_PART_OF_THE_NAME = frozenset({"log_stream"})


@dataclass
class KernelCensus:
    """What the work inside :func:`kernel_census` made CuPy build or load."""

    #: module name (:func:`module_name`) -> milliseconds its build or load took
    modules: dict[str, float] = field(default_factory=dict)
    #: NVRTC compilations of a kernel's source (modules not found in the kernel cache)
    compiled: int = 0
    #: NVRTC compilations of CuPy's empty probe program (once per set of options and process)
    probes: int = 0

    @property
    def load_ms(self) -> float:
        """Milliseconds spent building or loading modules (NVRTC's time included)."""
        return sum(self.modules.values())


def module_name(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A module's name: the hash of the arguments it was asked for with (``log_stream`` left out)."""
    named = sorted((k, v) for k, v in kwargs.items() if k not in _NOT_PART_OF_THE_NAME)
    return hashlib.sha256(repr((args, named)).encode()).hexdigest()[:24]


@contextlib.contextmanager
def kernel_census() -> Iterator[KernelCensus]:
    """Record every module CuPy builds or loads in this process while the block runs (one block at
    a time: it patches CuPy's compiler module and puts it back on exit)."""
    from cupy.cuda import compiler

    census = KernelCensus()
    original = compiler._compile_module_with_cache
    program: Any = getattr(compiler, "_NVRTCProgram", None)
    compile_program = getattr(program, "compile", None)

    def recording(*args: Any, **kwargs: Any) -> Any:
        name = module_name(args, kwargs)
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            census.modules[name] = census.modules.get(name, 0.0) + (time.perf_counter() - started) * 1e3

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "src", "x"):
            census.compiled += 1
        else:
            census.probes += 1
        return compile_program(self, *args, **kwargs)  # type: ignore[misc]

    compiler._compile_module_with_cache = recording
    if compile_program is not None:
        program.compile = counting
    try:
        yield census
    finally:
        compiler._compile_module_with_cache = original
        if compile_program is not None:
            program.compile = compile_program
