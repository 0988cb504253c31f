"""sin, cos, asin, log, exp and pow of float64 arrays from IEEE-rounded operations only, the same
bits on the host and on the device.

The host's libm and CUDA's differ in the last bits of their transcendental functions, so a distance
that goes through one of them (haversine's unit vectors and great circles, Minkowski's ``|x|^p``)
could order two edges one way on the CPU backend and the other way on the GPU backend. These
functions are FreeBSD's msun kernels (``k_sin.c``, ``k_cos.c``, ``e_asin.c``, ``e_log.c``,
``e_exp.c``) written out with ``+ - * /``, ``sqrt``, ``rint``, ``frexp`` and ``ldexp``, each one
correctly rounded, in one fixed order; ``kernels/detmath.cuh`` is the same code on the device
(``__dadd_rn`` and friends: no contraction into FMA). Accuracy: within 1-2 ulps of the true value
(the tests compare with NumPy's), except ``pow``, whose ``exp(p log x)`` carries the rounding of
``p log x`` (at most ``|p log x| 2^-53`` relative: 2^-43 where the result is a normal number).

Domains (the callers validate them): ``sin``/``cos`` for ``|x| <= 4 pi``, ``asin`` for
``0 <= x <= 1``, ``log`` for finite ``x > 0``, ``pow`` for finite ``x >= 0``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any  # a float64 NumPy array (or anything np.asarray takes)

# k_sin.c, k_cos.c
S1, S2, S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04
S4, S5, S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10
C1, C2, C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05
C4, C5, C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11
# e_rem_pio2.c's medium case: pi/2 as 33 bits plus the rest, so that n * PIO2_1 is exact for small n
INV_PIO2 = 6.36619772367581382433e-01
PIO2_1, PIO2_1T = 1.57079632673412561417e00, 6.07710050650619224932e-11
# e_asin.c
PIO2_HI, PIO2_LO, PIO4_HI = 1.57079632679489655800e00, 6.12323399573676603587e-17, 7.85398163397448278999e-01
PS0, PS1, PS2 = 1.66666666666666657415e-01, -3.25565818622400915405e-01, 2.01212532134862925881e-01
PS3, PS4, PS5 = -4.00555345006794114027e-02, 7.91534994289814532176e-04, 3.47933107596021167570e-05
QS1, QS2, QS3, QS4 = (
    -2.40339491173441421878e00,
    2.02094576023350569471e00,
    -6.88283971605453293030e-01,
    7.70381505559019352791e-02,
)
# e_log.c
LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
LG1, LG2, LG3 = 6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01
LG4, LG5, LG6, LG7 = (
    2.222219843214978396e-01,
    1.818357216161805012e-01,
    1.531383769920937332e-01,
    1.479819860511658591e-01,
)
SQRT_HALF = 7.07106781186547524401e-01
# e_exp.c
INV_LN2 = 1.44269504088896338700e00
EXP_P1, EXP_P2, EXP_P3 = 1.66666666666666019037e-01, -2.77777777770155933842e-03, 6.61375632143793436117e-05
EXP_P4, EXP_P5 = -1.65339022054652515390e-06, 4.13813679705723846039e-08
EXP_OVER, EXP_UNDER = 7.09782712893383973096e02, -7.45133219101941108420e02


def _f64(x: Array) -> np.ndarray[Any, Any]:
    return np.asarray(x, dtype=np.float64)


def _kernel_sin(x: Array, y: Array) -> Array:
    z = x * x
    w = z * z
    r = (S2 + z * (S3 + z * S4)) + (z * w) * (S5 + z * S6)
    v = z * x
    return x - (((z * (0.5 * y - v * r)) - y) - v * S1)


def _kernel_cos(x: Array, y: Array) -> Array:
    z = x * x
    w = z * z
    r = z * (C1 + z * (C2 + z * C3)) + (w * w) * (C4 + z * (C5 + z * C6))
    hz = 0.5 * z
    w = 1.0 - hz
    return w + (((1.0 - w) - hz) + (z * r - x * y))


def _reduce(x: Array) -> tuple[Array, Array, Array]:
    """``x = n pi/2 + y0 + y1`` with ``|y0| <= pi/4`` (about), ``n mod 4`` as int64."""
    n = np.rint(x * INV_PIO2)
    r = x - n * PIO2_1
    w = n * PIO2_1T
    y0 = r - w
    y1 = (r - y0) - w
    return np.mod(n.astype(np.int64), 4), y0, y1


def sin_cos(x: Array) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(sin x, cos x)`` for ``|x| <= 4 pi``."""
    q, y0, y1 = _reduce(_f64(x))
    s, c = _kernel_sin(y0, y1), _kernel_cos(y0, y1)
    sin = np.select([q == 0, q == 1, q == 2], [s, c, -s], -c)
    cos = np.select([q == 0, q == 1, q == 2], [c, -s, -c], s)
    return sin, cos


def _asin_poly(t: Array) -> Array:
    p = t * (PS0 + t * (PS1 + t * (PS2 + t * (PS3 + t * (PS4 + t * PS5)))))
    q = 1.0 + t * (QS1 + t * (QS2 + t * (QS3 + t * QS4)))
    return p / q


def asin(x: Array) -> np.ndarray[Any, Any]:
    """``asin x`` for ``0 <= x <= 1``."""
    x = _f64(x)
    small = x + x * _asin_poly(x * x)
    w = 1.0 - x
    t = w * 0.5
    ratio = _asin_poly(t)
    s = np.sqrt(t)
    near_one = PIO2_HI - (2.0 * (s + s * ratio) - PIO2_LO)
    hi = (s.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 at x = 1, a branch not taken
        c = (t - hi * hi) / (s + hi)
    p = (2.0 * s) * ratio - (PIO2_LO - 2.0 * c)
    middle = PIO4_HI - (p - (PIO4_HI - 2.0 * hi))
    out: np.ndarray[Any, Any] = np.where(x < 0.5, small, np.where(x >= 0.975, near_one, middle))
    return out


def log(x: Array) -> np.ndarray[Any, Any]:
    """``log x`` for finite ``x > 0`` (denormals included)."""
    mantissa, exponent = np.frexp(_f64(x))
    low = mantissa < SQRT_HALF
    m = np.where(low, mantissa * 2.0, mantissa)
    k = (exponent - low).astype(np.float64)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (LG2 + w * (LG4 + w * LG6))
    t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)))
    r = t2 + t1
    hfsq = (0.5 * f) * f
    out: np.ndarray[Any, Any] = k * LN2_HI - ((hfsq - (s * (hfsq + r) + k * LN2_LO)) - f)
    return out


def exp(y: Array) -> np.ndarray[Any, Any]:
    """``exp y`` (+inf past the largest double, 0 below the smallest denormal)."""
    y = _f64(y)
    k = np.rint(y * INV_LN2)
    hi = y - k * LN2_HI
    lo = k * LN2_LO
    r = hi - lo
    t = r * r
    c = r - t * (EXP_P1 + t * (EXP_P2 + t * (EXP_P3 + t * (EXP_P4 + t * EXP_P5))))
    value = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    with np.errstate(over="ignore", under="ignore"):
        scaled = np.ldexp(value, np.clip(k, -2000, 2000).astype(np.int32))
    return np.where(y > EXP_OVER, np.inf, np.where(y < EXP_UNDER, 0.0, scaled))


def pow_(x: Array, p: float) -> np.ndarray[Any, Any]:
    """``x^p`` for finite ``x >= 0`` and ``p > 0``: ``exp(p log x)``, 0 at 0."""
    x = _f64(x)
    positive = x > 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        value = exp(p * log(np.where(positive, x, 1.0)))
    return np.where(positive, value, 0.0)
