"""CUDA graphs whose loops run on the device: conditional WHILE nodes, through the CUDA driver API.

ECL-MST iterates until its worklists are empty. Driven from the host, every check is a read-back
that leaves the GPU idle while the host looks and launches again. A WHILE node (CUDA 12.4+
drivers) repeats its body graph for as long as a kernel in it says so (``cudaGraphSetConditional``),
so a whole run is one graph launch and one read-back, the first run as much as any later one.

CuPy captures kernel launches on a stream but cannot make conditional nodes; the few driver
calls below (libcuda through ctypes) assemble them around its captures:

>>> run = LoopGraph()                                       # doctest: +SKIP
>>> run.append(capture(stream, lambda: before()))           # doctest: +SKIP
>>> loop = run.append_while()                               # doctest: +SKIP
>>> loop.body(capture(stream, lambda: body(loop.handle)))   # doctest: +SKIP
>>> run.instantiate().launch(stream)                        # doctest: +SKIP

:func:`loops_supported` says whether this driver has them; without, callers loop on the host.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

_SUCCESS = 0
_NODE_TYPE_CONDITIONAL = 13  # CU_GRAPH_NODE_TYPE_CONDITIONAL
_COND_TYPE_WHILE = 1  # CU_GRAPH_COND_TYPE_WHILE
_COND_ASSIGN_DEFAULT = 1  # the handle's default value is set again at each launch of the graph
_CAPTURE_MODE_RELAXED = 2  # as CuPy's own captures: CuPy may query the driver while capturing
#: the first driver with conditional WHILE nodes (CUDA 12.4)
MIN_DRIVER_VERSION = 12040


class _ConditionalParams(ctypes.Structure):
    """CUDA_CONDITIONAL_NODE_PARAMS (cuda.h)."""

    _fields_ = [
        ("handle", ctypes.c_uint64),
        ("type", ctypes.c_int),
        ("size", ctypes.c_uint),
        ("graphs_out", ctypes.POINTER(ctypes.c_void_p)),
        ("ctx", ctypes.c_void_p),
    ]


class _NodeParamsUnion(ctypes.Union):
    _fields_ = [("reserved1", ctypes.c_longlong * 29), ("conditional", _ConditionalParams)]


class _NodeParams(ctypes.Structure):
    """CUgraphNodeParams (cuda.h): 256 bytes, a node type and its parameters."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("reserved0", ctypes.c_int * 3),
        ("params", _NodeParamsUnion),
        ("reserved2", ctypes.c_longlong),
    ]


assert ctypes.sizeof(_NodeParams) == 256


class DriverError(RuntimeError):
    """A CUDA driver call failed (its name and the driver's message)."""


@functools.cache
def _libcuda() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return lib


def _call(name: str, *args: Any) -> None:
    lib = _libcuda()
    status = int(getattr(lib, name)(*args))
    if status != _SUCCESS:
        text = ctypes.c_char_p()
        lib.cuGetErrorString(status, ctypes.byref(text))
        message = text.value.decode() if text.value else "unknown error"
        raise DriverError(f"{name} failed: {message} (CUresult {status})")


@functools.cache
def loops_supported() -> bool:
    """Whether this host's driver runs conditional WHILE nodes (and libcuda has the calls)."""
    try:
        version = ctypes.c_int()
        _call("cuDriverGetVersion", ctypes.byref(version))
        lib = _libcuda()
        for name in ("cuGraphConditionalHandleCreate", "cuGraphAddNode_v2", "cuStreamBeginCapture_v2"):
            getattr(lib, name)
    except (OSError, AttributeError, DriverError):
        return False
    return version.value >= MIN_DRIVER_VERSION


def capture(stream: Any, launches: Callable[[], None]) -> ctypes.c_void_p:
    """The graph of what ``launches`` enqueues on ``stream`` (a CuPy stream), captured, not run.

    The caller owns the graph (:class:`LoopGraph` takes it over).
    """
    _call("cuStreamBeginCapture_v2", ctypes.c_void_p(stream.ptr), ctypes.c_int(_CAPTURE_MODE_RELAXED))
    graph = ctypes.c_void_p()
    try:
        with stream:  # CuPy launches on its current stream
            launches()
    finally:
        _call("cuStreamEndCapture", ctypes.c_void_p(stream.ptr), ctypes.byref(graph))
    return graph


class WhileLoop:
    """A WHILE node of a :class:`LoopGraph`: its body runs again while a kernel of the body sets
    ``handle`` (``cudaGraphSetConditional(handle, 1)``); the first pass always runs."""

    def __init__(self, handle: int, body_graph: ctypes.c_void_p) -> None:
        self.handle = handle
        self._body = body_graph

    def body(self, graph: ctypes.c_void_p) -> None:
        """Make ``graph`` (from :func:`capture`; destroyed here) the loop's body."""
        try:
            node = ctypes.c_void_p()
            _call("cuGraphAddChildGraphNode", ctypes.byref(node), self._body, None, ctypes.c_size_t(0), graph)
        finally:
            _call("cuGraphDestroy", graph)


class LoopGraph:
    """A CUDA graph built as a chain: captured pieces and WHILE loops, one after the other."""

    def __init__(self) -> None:
        self._graph = ctypes.c_void_p()
        _call("cuGraphCreate", ctypes.byref(self._graph), ctypes.c_uint(0))
        self._ctx = ctypes.c_void_p()
        _call("cuCtxGetCurrent", ctypes.byref(self._ctx))
        self._last: ctypes.c_void_p | None = None

    def _after_last(self) -> tuple[Any, ctypes.c_size_t]:
        if self._last is None:
            return None, ctypes.c_size_t(0)
        return ctypes.byref(self._last), ctypes.c_size_t(1)

    def append(self, graph: ctypes.c_void_p) -> None:
        """Add ``graph`` (from :func:`capture`; destroyed here) after what the chain has."""
        try:
            node = ctypes.c_void_p()
            deps, count = self._after_last()
            _call("cuGraphAddChildGraphNode", ctypes.byref(node), self._graph, deps, count, graph)
        finally:
            _call("cuGraphDestroy", graph)
        self._last = node

    def append_while(self) -> WhileLoop:
        """Add a WHILE loop after what the chain has; fill its body with :meth:`WhileLoop.body`."""
        handle = ctypes.c_uint64()
        first, assign = ctypes.c_uint(1), ctypes.c_uint(_COND_ASSIGN_DEFAULT)  # the first pass always runs
        _call("cuGraphConditionalHandleCreate", ctypes.byref(handle), self._graph, self._ctx, first, assign)
        params = _NodeParams()
        params.type = _NODE_TYPE_CONDITIONAL
        conditional = params.params.conditional
        conditional.handle = handle.value
        conditional.type = _COND_TYPE_WHILE
        conditional.size = 1
        conditional.ctx = self._ctx
        node = ctypes.c_void_p()
        deps, count = self._after_last()
        _call("cuGraphAddNode_v2", ctypes.byref(node), self._graph, deps, None, count, ctypes.byref(params))
        self._last = node
        return WhileLoop(handle.value, ctypes.c_void_p(conditional.graphs_out[0]))

    def instantiate(self) -> GraphExec:
        """The executable graph (this one can be dropped after)."""
        executable = ctypes.c_void_p()
        _call("cuGraphInstantiateWithFlags", ctypes.byref(executable), self._graph, ctypes.c_ulonglong(0))
        return GraphExec(executable)

    def __del__(self) -> None:
        if self._graph:
            _libcuda().cuGraphDestroy(self._graph)
            self._graph = ctypes.c_void_p()


class GraphExec:
    """An instantiated graph: launch it on a stream."""

    def __init__(self, executable: ctypes.c_void_p) -> None:
        self._exec = executable

    def upload(self, stream: Any) -> None:
        """Do the first launch's set-up on the device now (not inside the first run)."""
        _call("cuGraphUpload", self._exec, ctypes.c_void_p(stream.ptr))

    def launch(self, stream: Any) -> None:
        _call("cuGraphLaunch", self._exec, ctypes.c_void_p(stream.ptr))

    def __del__(self) -> None:
        if self._exec:
            _libcuda().cuGraphExecDestroy(self._exec)
            self._exec = ctypes.c_void_p()
