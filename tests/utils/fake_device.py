"""A stand-in array module for CuPy, for running device-path drivers on the CPU.

Its arrays wrap NumPy arrays but are no NumPy arrays: a NumPy function handed one raises (as
NumPy does with a CuPy array), so a driver that slips from ``xp`` to ``np`` fails here. The
module offers only the functions the drivers use, with CuPy's signatures (``argsort`` takes no
``kind`` and is stable); it counts the host synchronizations (``bool``, ``int``, ``float`` of a
device array) and the copies to the host (``get``).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np


class Counters:
    def __init__(self) -> None:
        self.syncs = 0
        self.copies = 0


class DeviceArray:
    """A wrapped NumPy array with CuPy's surface."""

    __slots__ = ("_a", "_counters")
    __array_ufunc__ = None  # NumPy's operators defer to this class's (reflected) ones

    def __init__(self, a: np.ndarray, counters: Counters) -> None:
        assert isinstance(a, np.ndarray)
        self._a = a
        self._counters = counters

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("Implicit conversion to a NumPy array is not allowed (call .get()).")

    def __iter__(self) -> Any:
        raise TypeError("iterating over a device array")

    @property
    def shape(self) -> tuple[int, ...]:
        return self._a.shape

    @property
    def dtype(self) -> np.dtype:
        return self._a.dtype

    @property
    def ndim(self) -> int:
        return self._a.ndim

    @property
    def size(self) -> int:
        return self._a.size

    def get(self) -> np.ndarray:
        self._counters.copies += 1
        return self._a.copy()

    def _sync(self) -> Any:
        assert self._a.size == 1, "a conversion of an array of more than one element"
        self._counters.syncs += 1
        return self._a.reshape(()).item()

    def __bool__(self) -> bool:
        return bool(self._sync())

    def __int__(self) -> int:
        return int(self._sync())

    def __index__(self) -> int:
        raise TypeError("a device array used as a Python index")

    def __float__(self) -> float:
        return float(self._sync())

    def astype(self, dtype: Any) -> DeviceArray:
        return self._wrap(self._a.astype(dtype))

    def copy(self) -> DeviceArray:
        return self._wrap(self._a.copy())

    def argsort(self) -> DeviceArray:
        return self._wrap(np.argsort(self._a, kind="stable"))  # CuPy's sorts are stable

    def _wrap(self, a: Any) -> DeviceArray:
        return DeviceArray(np.asarray(a), self._counters)

    def __getitem__(self, key: Any) -> DeviceArray:
        if isinstance(key, DeviceArray) and key.dtype == np.bool_:
            self._counters.syncs += 1  # the result's size: CuPy waits for the mask
        return self._wrap(self._a[_unwrap(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        self._a[_unwrap(key)] = _unwrap(value)


def _unwrap(x: Any) -> Any:
    if isinstance(x, DeviceArray):
        return x._a
    if isinstance(x, tuple):
        return tuple(_unwrap(i) for i in x)
    if isinstance(x, np.ndarray):
        raise TypeError("a host (NumPy) array mixed into a device operation")
    return x


def _binary(op: Callable[..., Any], reflected: bool = False) -> Callable[..., Any]:
    def method(self: DeviceArray, other: Any) -> DeviceArray:
        with np.errstate(all="ignore"):  # CuPy warns of nothing
            a, b = (other, self) if reflected else (self, other)
            return self._wrap(op(_unwrap(a), _unwrap(b)))

    return method


for _name, _op in {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "and": np.bitwise_and, "or": np.bitwise_or,
    "lshift": np.left_shift, "rshift": np.right_shift,
}.items():  # fmt: skip
    setattr(DeviceArray, f"__{_name}__", _binary(_op))
    setattr(DeviceArray, f"__r{_name}__", _binary(_op, reflected=True))
for _name, _op in {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}.items():  # fmt: skip
    setattr(DeviceArray, f"__{_name}__", _binary(_op))
setattr(DeviceArray, "__neg__", lambda self: self._wrap(-self._a))  # noqa: B010
setattr(DeviceArray, "__invert__", lambda self: self._wrap(~self._a))  # noqa: B010
DeviceArray.__hash__ = None  # type: ignore[assignment]


def module() -> tuple[types.ModuleType, Counters]:
    """A fresh stand-in module and its counters."""
    counters = Counters()
    xp = types.ModuleType("fake_cupy")

    def wrap(a: Any) -> DeviceArray:
        return DeviceArray(np.asarray(a), counters)

    def fn(f: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with np.errstate(all="ignore"):
                out = f(*(_unwrap(a) for a in args), **{k: _unwrap(v) for k, v in kwargs.items()})
            return wrap(out)

        return call

    for name in ("int32", "int64", "uint8", "uint64", "float64", "bool_", "inf"):
        setattr(xp, name, getattr(np, name))
    for name in ("arange", "zeros", "empty", "full", "ones", "where", "array_equal", "cumsum", "bincount"):
        setattr(xp, name, fn(getattr(np, name)))

    def flatnonzero(a: Any) -> DeviceArray:
        counters.syncs += 1  # the result's size
        return wrap(np.flatnonzero(_unwrap(a)))

    setattr(xp, "flatnonzero", flatnonzero)  # noqa: B010
    for name in ("minimum", "maximum", "isinf"):
        setattr(xp, name, fn(getattr(np, name)))
    setattr(xp, "searchsorted", fn(lambda a, v, side="left": np.searchsorted(a, v, side=side)))  # noqa: B010
    setattr(xp, "concatenate", fn(np.concatenate))  # noqa: B010
    setattr(xp, "ascontiguousarray", fn(lambda a, dtype=None: np.ascontiguousarray(a, dtype=dtype)))  # noqa: B010

    def asarray(a: Any) -> DeviceArray:  # a copy to the device
        return a if isinstance(a, DeviceArray) else wrap(np.array(a))

    setattr(xp, "asarray", asarray)  # noqa: B010
    return xp, counters


def to_device(xp: types.ModuleType, a: np.ndarray) -> DeviceArray:
    return xp.asarray(a)


def unwrapping(launch: Callable[..., None]) -> Callable[..., None]:
    """A kernel launcher over NumPy arrays made one over the stand-in's arrays."""

    def call(name: str, grid: tuple[int], block: tuple[int], args: tuple[Any, ...]) -> None:
        launch(name, grid, block, tuple(a._a if isinstance(a, DeviceArray) else a for a in args))

    return call
