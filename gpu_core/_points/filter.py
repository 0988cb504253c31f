"""How far a GEMM-filtered squared distance can be from the exact one: the brute-force path's margin.

The brute-force searches (``brute``) rank candidates by a fast squared distance from a matrix
product and recheck, exactly, every candidate the fast value cannot rule out. The fast value of
points ``a`` and ``b`` (rows of the float64 coordinates ``X``) is

    F = ‖ã‖² + ‖b̃‖² - 2 ã·b̃,    ã = p(a - μ), b̃ = p(b - μ)

with ``μ`` any fixed shift (the mean: it keeps the norms small), ``p`` the rounding of the GEMM's
inputs (none for float64, float32, or TF32's 10-bit mantissa), the norms summed in float64 from
those rounded values and ``ã·b̃`` the GEMM's (float64 on the host; float32 or TF32 on a GPU,
accumulated in float32 in any order). The exact value the contract compares is
``D = Σ (a_k - b_k)²`` in float64, dimension order, one rounding per operation.

**The bound.** With ``u_in`` the relative error of an input (``|ã_k - (a_k - μ_k)| ≤ u_in |a_k - μ_k|``,
the shift's own float64 rounding included), ``gamma = d u_acc / (1 - d u_acc)`` the accumulation bound of
a dot product of ``d`` terms in any order (Higham, Thm. 3.1 with any summation tree), ``N = ‖a - μ‖ +
‖b - μ‖`` and ``u`` float64's unit roundoff::

    |F - D| ≤ c · N²,   c = gamma/2 · (1 + u_in)² + 2 u_in + u_in² + 2 (d + 3) u

Four terms: the GEMM's dot product (``|ã·b̃|`` error ``≤ gamma ‖ã‖‖b̃‖ ≤ gamma N²/4``, doubled), the input
rounding (``‖ã - b̃‖`` moves by at most ``u_in N``, so its square by ``2 u_in N ‖a - b‖ + u_in² N²`` and
``‖a - b‖ ≤ N``), the float64 norms and sums, and the contract's own rounding of ``D`` (``(d + 2) u D``,
``D ≤ N²``). :func:`coefficient` returns ``c`` doubled (a safety factor for the small terms
rounded away above); the searches use ``E_i = c (‖ã_i‖ + R)²`` for a query row ``i``, ``R`` the
largest norm of any target, so ``|F_ij - D_ij| ≤ E_i`` for every target ``j``.

**Why every true candidate survives.** Let ``F_(m)`` be the m-th smallest fast value of a row
over *any* set of targets (a tile, the tiles seen so far). Those m targets have exact values at
most ``F_(m) + E_i``, so the row's true m-th smallest exact value ``D_(m)`` is at most that. Every
target in the true top m (ties included: ``D_j ≤ D_(m)``) then has ``F_j ≤ D_j + E_i ≤ F_(m) + 2E_i``:
the threshold ``θ_i = F_(m) + 2E_i`` keeps it. Once m candidates are rechecked exactly, their m-th
exact value ``D*`` bounds ``D_(m)`` too, and ``θ_i = D* + E_i`` is valid. Mutual-reachability keys
``max(c_i, c_j, ·)`` with exact core distances move by no more than their argument, so the same
thresholds hold for them. A filter only ever keeps more than it must; the answer is decided by
the exact values under the ``(key, index)`` order alone, so it is the same on both backends.
"""

from __future__ import annotations

from typing import Literal

#: the filter's arithmetic: float64 GEMM (the host's BLAS), float32 (cuBLAS SGEMM, IEEE) or TF32
#: (tensor cores: inputs rounded to a 10-bit mantissa, float32 accumulation)
Precision = Literal["float64", "float32", "tf32"]
PRECISIONS: tuple[Precision, ...] = ("float64", "float32", "tf32")

U64 = 2.0**-53
#: (input rounding, accumulation unit roundoff) per precision. TF32: the float32 copy, then the
#: tensor core's 10 explicit bits (2^-10 covers truncation as well as rounding); products of TF32
#: values are exact in float32, and the accumulation truncates on some generations: twice float32's
#: unit roundoff.
_UNITS: dict[str, tuple[float, float]] = {
    "float64": (0.0, U64),
    "float32": (2.0**-24, 2.0**-24),
    "tf32": (2.0**-10 + 2.0**-24, 2.0**-23),
}
SAFETY = 2.0


def coefficient(d: int, precision: Precision) -> float:
    """``c`` of the bound ``|F - D| ≤ c N²`` for ``d`` coordinates (the module's docstring), with
    the safety factor."""
    rounding, acc = _UNITS[precision]
    u_in = rounding + U64 * (1.0 + rounding)  # the shift a - μ in float64, then the input's rounding
    gamma = d * acc / (1.0 - d * acc)
    c = gamma / 2.0 * (1.0 + u_in) ** 2 + 2.0 * u_in + u_in * u_in + 2.0 * (d + 3) * U64
    return SAFETY * c
