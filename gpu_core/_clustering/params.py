"""scikit-learn's estimator protocol (``get_params``, ``set_params``, ``repr``), without scikit-learn.

The parameters are the constructor's arguments, stored under their own names, as scikit-learn's
``BaseEstimator`` reads them; ``clone`` and ``check_estimator`` need nothing more. Shared by
:class:`gpu_core.HDBSCAN` and the client's ``RemoteHDBSCAN``, neither of which may import
scikit-learn to be constructed.
"""

from __future__ import annotations

import inspect
from typing import Any, Self


class EstimatorParams:
    """``get_params``/``set_params``/``repr`` from the constructor's signature."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        del deep  # no parameter is an estimator
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> Self:
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"Invalid parameter {name!r} for estimator {type(self).__name__}. "
                    f"Valid parameters are: {sorted(valid)!r}."
                )
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()}
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if not same_value(v, defaults[k])]
        return f"{type(self).__name__}({', '.join(changed)})"


def same_value(a: Any, b: Any) -> bool:
    """Whether a parameter equals its default (an array or anything without a plain ``==``: only
    the default object itself)."""
    try:
        return bool(a == b) and type(a) is type(b)
    except (TypeError, ValueError):
        return a is b
