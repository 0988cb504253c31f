"""How far a GEMM-filtered squared distance can be from the exact one: the brute-force path's margin.

The brute-force searches (``brute``) rank candidates by a fast squared distance from a matrix
product and recheck, exactly, every candidate the fast value cannot rule out. The fast value of
points ``a`` and ``b`` (rows of the float64 coordinates ``X``) is

    F = ‖ã‖² + ‖b̃‖² - 2 ã·b̃,    ã = p(s(a - μ)), b̃ = p(s(b - μ))

with ``μ`` any fixed shift (the mean: it keeps the norms small), ``s`` a power of two (the
device's float16 copy: the largest coordinate lands in ``(2^12, 2^13]``, far from float16's
overflow and subnormals; 1 elsewhere), ``p`` the rounding of the GEMM's inputs (none for float64,
float32, TF32's 10-bit or float16's 11-bit significand), the norms summed in float64 from those
rounded values and ``ã·b̃`` the GEMM's (float64 on the host; float32 accumulation on a GPU, in any
order, through tensor cores that may truncate). ``F`` is in the scaled units: ``s² D``. The exact
value the contract compares is ``D = Σ (a_k - b_k)²`` in float64, dimension order, one rounding
per operation.

**The bound.** With ``u_in`` the relative error of an input (``|ã_k - s(a_k - μ_k)| ≤ u_in |s(a_k -
μ_k)|``, the shift's own float64 rounding and float16's subnormal spacing included), ``N = s(‖a - μ‖
+ ‖b - μ‖)``, ``δ = u_in N`` (so ``|‖ã - b̃‖ - s‖a - b‖| ≤ δ`` by the triangle inequality),
``gamma = d u_acc / (1 - d u_acc)`` the accumulation bound of a dot product of ``d`` terms in any
order (Higham, Thm. 3.1 with any summation tree) and ``u`` float64's unit roundoff::

    |F - s²D| ≤ E(s²D),   E(x) = alpha √x + beta,   alpha = 2 u_in N (1 + (d + 2) u),
    beta = (u_in² + gamma/2 (1 + u_in)² + 4 u32 (1 + u_in)² + 2 (d + 3) u) N²

``alpha √x + δ²``: the rounded inputs move ``‖a - b‖`` by at most ``δ``, so its square by
``2 δ s‖a - b‖ + δ²`` (``√(s²D)`` stands for ``s‖a - b‖`` up to the contract's rounding, the
``(d + 2) u`` in ``alpha``); then the GEMM's dot product (``|ã·b̃|`` error ``≤ gamma ‖ã‖‖b̃‖ ≤ gamma
N²/4``, doubled), the device's float32 norms and its fused ``‖b̃‖² - 2 ã·b̃`` (``4 u32``), the float64
norms and the contract's own rounding of ``D`` (``2 (d + 3) u``). :func:`margin_terms` returns the
coefficients of ``alpha`` and ``beta`` doubled (a safety factor for the small terms rounded away above);
the searches use ``N_i = s(‖a_i - μ‖ + R)`` for a query row ``i``, ``R`` the largest norm of any
target, so one ``(alpha_i, beta_i)`` holds for every target of the row. Keeping ``√x`` (rather than
bounding ``‖a - b‖`` by ``N``) makes the margin of near neighbours several times narrower than
``N²`` alone would.

**Why every true candidate survives.** Let ``K`` be a key (``s²D``, or under mutual reachability
``max(c_i, c_j, s²D)`` with exact cores ``c``) and ``K̃`` its filtered value (``F`` in place of
``s²D``): ``K̃ ≤ K + E(K)`` (``E`` grows with its argument) and ``K ≤ upper(K̃)``, the largest
``x`` with ``x - E(x) ≤ K̃`` (:func:`upper`). Let ``K̃_(m)`` be the m-th smallest filtered key of a
row over *any* set of targets (a tile, the tiles seen so far): those m targets have keys at most
``Θ = upper(K̃_(m))``, so the row's true m-th smallest key ``K_(m)`` is at most ``Θ``, and every
target of the true top m (ties included: ``K_j ≤ K_(m)``) has ``K̃_j ≤ Θ + E(Θ)``: the threshold
``T = threshold(Θ)`` keeps it (:func:`threshold` adds a relative ``2^-20`` and rounds up, so the
device may round keys and thresholds to float32 in the safe direction). Once m candidates are
rechecked exactly, their m-th exact key bounds ``K_(m)`` too and is a valid ``Θ``. A filter only
ever keeps more than it must; the answer is decided by the exact values under the ``(key, index)``
order alone, so it is the same on both backends.

Design: docs/design/brute-force.md.
"""

from __future__ import annotations

import math
from typing import Any, Literal

#: the filter's arithmetic: float64 GEMM (the host's BLAS), float32 (IEEE), TF32 (inputs rounded
#: to a 10-bit significand, float32 accumulation) or float16 (the device's tensor cores: inputs
#: rounded to 11 bits after scaling by a power of two, float32 accumulation)
Precision = Literal["float64", "float32", "tf32", "float16"]
PRECISIONS: tuple[Precision, ...] = ("float64", "float32", "tf32", "float16")

U64 = 2.0**-53
U32 = 2.0**-24
#: (input rounding, accumulation unit roundoff) per precision. TF32: the float32 copy, then the
#: tensor core's 10 explicit bits (2^-10 covers truncation as well as rounding). float16: round to
#: nearest (2^-11), plus float16's subnormal spacing against the smallest row scale (2^-25 sqrt(d)
#: over N >= 2^12: under 2^-32 for d <= 1,024). Tensor cores' float32 accumulation may truncate:
#: 2^-22 (four times float32's unit roundoff) for the float16 GEMM, twice for TF32's.
_UNITS: dict[str, tuple[float, float]] = {
    "float64": (0.0, U64),
    "float32": (U32, U32),
    "tf32": (2.0**-10 + U32, 2.0**-23),
    "float16": (2.0**-11 + 2.0**-32, 2.0**-22),
}
SAFETY = 2.0
#: relative slack of a threshold over ``Θ + E(Θ)`` (keys and thresholds rounded to float32 by the device)
SLACK = 2.0**-20
#: relative slack for the rounding of the margin's own float64 arithmetic
ROUNDING = 2.0**-40
#: the largest coordinate of the device's float16 copy, after scaling (a power of two)
FLOAT16_TOP = 2.0**13


def margin_terms(d: int, precision: Precision) -> tuple[float, float]:
    """``(a, b)`` of the bound's ``alpha = a N`` and ``beta = b N²`` for ``d`` coordinates (the module's
    docstring), with the safety factor."""
    rounding, acc = _UNITS[precision]
    u_in = rounding + U64 * (1.0 + rounding)  # the shift a - μ in float64, then the input's rounding
    terms = max(d, 32)  # the device pads to 32 coordinates (exact zeros; counted all the same)
    gamma = terms * acc / (1.0 - terms * acc)
    grow = (1.0 + u_in) ** 2
    a = 2.0 * u_in * (1.0 + (d + 2) * U64)
    b = u_in * u_in + gamma / 2.0 * grow + 4.0 * U32 * grow + 2.0 * (d + 3) * U64
    return SAFETY * a, SAFETY * b


def coefficient(d: int, precision: Precision) -> float:
    """A single ``c`` with ``E(x) ≤ c N²`` for every ``x ≤ N²`` (``a + b``): the margin's size relative
    to the squared norms, for comparing precisions."""
    a, b = margin_terms(d, precision)
    return a + b


def row_terms(
    xp: Any, norms: Any, radius: float, scale: float, d: int, precision: Precision
) -> tuple[Any, Any]:
    """Each query row's ``(alpha_i, beta_i)`` (float64 arrays) from its shifted norms ``‖a_i - μ‖``, the
    targets' largest ``R`` and the scale ``s`` (the float64 norms' own rounding covered)."""
    a, b = margin_terms(d, precision)
    big = (norms + radius) * (scale * (1.0 + 2.0**-30))
    return a * big, b * big * big


def upper(xp: Any, key: Any, alpha: Any, beta: Any) -> Any:
    """The largest ``x`` with ``x - alpha √x - beta ≤ key``: an upper bound on the exact key of a target
    whose filtered key is ``key`` (elementwise; ``+inf`` stays ``+inf``)."""
    disc = xp.maximum(alpha * alpha + 4.0 * (key + beta), 0.0)  # negative by rounding alone
    root = (alpha + xp.sqrt(disc)) * 0.5
    return root * root * (1.0 + ROUNDING)


def threshold(xp: Any, theta: Any, alpha: Any, beta: Any) -> Any:
    """The filtered keys to keep when the true m-th key is at most ``theta``: ``Θ + E(Θ)`` with slack."""
    safe = xp.maximum(theta, 0.0)
    return (safe * (1.0 + SLACK) + alpha * xp.sqrt(safe) + beta) * (1.0 + ROUNDING)


def float16_scale(largest: float) -> float | None:
    """The power of two that brings the largest shifted coordinate into ``(2^12, 2^13]`` (1 when
    every coordinate is 0; None where it would be past ``2^±500``, whose square no float64 holds
    with room: the device's searches then run on the host)."""
    if largest == 0.0:
        return 1.0
    if not largest > 0.0 or not math.isfinite(largest):
        return None
    exponent = math.floor(math.log2(FLOAT16_TOP / largest))
    while math.ldexp(largest, exponent) > FLOAT16_TOP:  # log2's rounding
        exponent -= 1
    while math.ldexp(largest, exponent + 1) <= FLOAT16_TOP:
        exponent += 1
    return math.ldexp(1.0, exponent) if abs(exponent) <= 500 else None
