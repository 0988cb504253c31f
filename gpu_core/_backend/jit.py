"""Numba, where it is installed (the ``fast`` extra): the host's sequential passes compiled.

Compiled functions are cached on disk (``cache=True``): in ``__pycache__`` next to the
package where that is writable, else in ``NUMBA_CACHE_DIR`` or the user's cache folder
(the image sets ``NUMBA_CACHE_DIR`` to the data volume). Where no cache folder is writable
they compile once per process. Either way :func:`gpu_core.warm_up` compiles or loads them,
so no request pays for it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


@functools.cache
def available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def jit(fn: Callable[..., Any], *, inline: bool = False) -> Any:
    """``numba.njit(cache=True, nogil=True)(fn)``; without a writable cache folder, uncached.

    ``error_model="numpy"``: a division by zero gives IEEE's inf or nan instead of raising, so
    no division carries a check; the passes guard their divisions themselves. ``inline``: see
    :func:`jit_inline`.
    """
    import numba

    options: dict[str, Any] = {"nogil": True, "error_model": "numpy"}
    if inline:
        options["inline"] = "always"
    try:
        return numba.njit(cache=True, **options)(fn)
    except RuntimeError:  # "no locator available": no writable cache folder anywhere
        return numba.njit(**options)(fn)


def jit_inline(fn: Callable[..., Any]) -> Any:
    """:func:`jit`, and Numba inlines it into its compiled callers: a part of a hot loop that
    LLVM would otherwise leave a call."""
    return jit(fn, inline=True)


@functools.cache
def prefetch() -> Any:
    """``prefetch(array, i)`` inside compiled code: LLVM's ``llvm.prefetch`` of ``array[i]``'s
    cache line (a hint: it never faults, never blocks). The union-find of 10^7 points misses the
    cache on nearly every access; fetching the lines of merges a few steps ahead hides that."""
    import importlib

    from numba import types
    from numba.extending import intrinsic

    binding: Any = importlib.import_module("llvmlite.binding")  # untyped: Any, like numba's own
    ir: Any = importlib.import_module("llvmlite.ir")
    cgutils: Any = importlib.import_module("numba.core.cgutils")
    name = "llvm.prefetch.p0" if binding.llvm_version_info >= (15,) else "llvm.prefetch.p0i8"

    @intrinsic
    def _prefetch(typingctx: Any, array: Any, index: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            array_type = signature.args[0]
            view = context.make_array(array_type)(context, builder, args[0])
            pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]])
            byte_pointer = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), name
            )
            # read, high temporal locality, data cache
            builder.call(fn, [builder.bitcast(pointer, byte_pointer), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()

        return types.void(array, index), codegen

    return _prefetch
