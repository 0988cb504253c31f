// sin, cos, asin, log, exp and pow from IEEE-rounded operations only: the device half of
// gpu_core/_points/detmath.py, operation for operation (FreeBSD msun's k_sin.c, k_cos.c, e_asin.c,
// e_log.c, e_exp.c), so the host and the device compute the same bits. Every operation is an explicit
// round-to-nearest intrinsic: no contraction into FMA, whatever the module's --fmad.
#ifndef GPU_CORE_DETMATH_CUH
#define GPU_CORE_DETMATH_CUH

#define DM_ADD(a, b) __dadd_rn((a), (b))
#define DM_SUB(a, b) __dsub_rn((a), (b))
#define DM_MUL(a, b) __dmul_rn((a), (b))
#define DM_DIV(a, b) __ddiv_rn((a), (b))

namespace detmath {

constexpr double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                 S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                 S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
constexpr double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                 C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                 C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
constexpr double INV_PIO2 = 6.36619772367581382433e-01, PIO2_1 = 1.57079632673412561417e+00,
                 PIO2_1T = 6.07710050650619224932e-11;
constexpr double PIO2_HI = 1.57079632679489655800e+00, PIO2_LO = 6.12323399573676603587e-17,
                 PIO4_HI = 7.85398163397448278999e-01;
constexpr double PS0 = 1.66666666666666657415e-01, PS1 = -3.25565818622400915405e-01,
                 PS2 = 2.01212532134862925881e-01, PS3 = -4.00555345006794114027e-02,
                 PS4 = 7.91534994289814532176e-04, PS5 = 3.47933107596021167570e-05;
constexpr double QS1 = -2.40339491173441421878e+00, QS2 = 2.02094576023350569471e+00,
                 QS3 = -6.88283971605453293030e-01, QS4 = 7.70381505559019352791e-02;
constexpr double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
constexpr double LG1 = 6.666666666666735130e-01, LG2 = 3.999999999940941908e-01,
                 LG3 = 2.857142874366239149e-01, LG4 = 2.222219843214978396e-01,
                 LG5 = 1.818357216161805012e-01, LG6 = 1.531383769920937332e-01,
                 LG7 = 1.479819860511658591e-01;
constexpr double SQRT_HALF = 7.07106781186547524401e-01;
constexpr double INV_LN2 = 1.44269504088896338700e+00;
constexpr double EXP_P1 = 1.66666666666666019037e-01, EXP_P2 = -2.77777777770155933842e-03,
                 EXP_P3 = 6.61375632143793436117e-05, EXP_P4 = -1.65339022054652515390e-06,
                 EXP_P5 = 4.13813679705723846039e-08;
constexpr double EXP_OVER = 7.09782712893383973096e+02, EXP_UNDER = -7.45133219101941108420e+02;

__device__ __forceinline__ double kernel_sin(double x, double y) {
    const double z = DM_MUL(x, x);
    const double w = DM_MUL(z, z);
    const double r = DM_ADD(DM_ADD(S2, DM_MUL(z, DM_ADD(S3, DM_MUL(z, S4)))),
                            DM_MUL(DM_MUL(z, w), DM_ADD(S5, DM_MUL(z, S6))));
    const double v = DM_MUL(z, x);
    return DM_SUB(x, DM_SUB(DM_SUB(DM_MUL(z, DM_SUB(DM_MUL(0.5, y), DM_MUL(v, r))), y), DM_MUL(v, S1)));
}

__device__ __forceinline__ double kernel_cos(double x, double y) {
    const double z = DM_MUL(x, x);
    double w = DM_MUL(z, z);
    const double r = DM_ADD(DM_MUL(z, DM_ADD(C1, DM_MUL(z, DM_ADD(C2, DM_MUL(z, C3))))),
                            DM_MUL(DM_MUL(w, w), DM_ADD(C4, DM_MUL(z, DM_ADD(C5, DM_MUL(z, C6))))));
    const double hz = DM_MUL(0.5, z);
    w = DM_SUB(1.0, hz);
    return DM_ADD(w, DM_ADD(DM_SUB(DM_SUB(1.0, w), hz), DM_SUB(DM_MUL(z, r), DM_MUL(x, y))));
}

// (sin x, cos x) for |x| <= 4 pi.
__device__ __forceinline__ void sin_cos(double x, double* s_out, double* c_out) {
    const double n = rint(DM_MUL(x, INV_PIO2));
    const double r = DM_SUB(x, DM_MUL(n, PIO2_1));
    const double w = DM_MUL(n, PIO2_1T);
    const double y0 = DM_SUB(r, w);
    const double y1 = DM_SUB(DM_SUB(r, y0), w);
    const int q = ((static_cast<int>(n) % 4) + 4) % 4;
    const double s = kernel_sin(y0, y1), c = kernel_cos(y0, y1);
    *s_out = q == 0 ? s : (q == 1 ? c : (q == 2 ? -s : -c));
    *c_out = q == 0 ? c : (q == 1 ? -s : (q == 2 ? -c : s));
}

__device__ __forceinline__ double asin_poly(double t) {
    const double p = DM_MUL(
        t, DM_ADD(PS0, DM_MUL(t, DM_ADD(PS1, DM_MUL(t, DM_ADD(PS2, DM_MUL(t, DM_ADD(PS3, DM_MUL(t, DM_ADD(PS4, DM_MUL(t, PS5)))))))))));
    const double q = DM_ADD(1.0, DM_MUL(t, DM_ADD(QS1, DM_MUL(t, DM_ADD(QS2, DM_MUL(t, DM_ADD(QS3, DM_MUL(t, QS4))))))));
    return DM_DIV(p, q);
}

// asin x for 0 <= x <= 1.
__device__ __forceinline__ double asin(double x) {
    if (x < 0.5) return DM_ADD(x, DM_MUL(x, asin_poly(DM_MUL(x, x))));
    const double t = DM_MUL(DM_SUB(1.0, x), 0.5);
    const double ratio = asin_poly(t);
    const double s = __dsqrt_rn(t);
    if (x >= 0.975) return DM_SUB(PIO2_HI, DM_SUB(DM_MUL(2.0, DM_ADD(s, DM_MUL(s, ratio))), PIO2_LO));
    const double hi =
        __longlong_as_double(static_cast<long long>(static_cast<unsigned long long>(__double_as_longlong(s)) &
                                                    0xFFFFFFFF00000000ULL));
    const double c = DM_DIV(DM_SUB(t, DM_MUL(hi, hi)), DM_ADD(s, hi));
    const double p = DM_SUB(DM_MUL(DM_MUL(2.0, s), ratio), DM_SUB(PIO2_LO, DM_MUL(2.0, c)));
    return DM_SUB(PIO4_HI, DM_SUB(p, DM_SUB(PIO4_HI, DM_MUL(2.0, hi))));
}

// log x for finite x > 0.
__device__ __forceinline__ double log(double x) {
    int exponent;
    double m = frexp(x, &exponent);
    if (m < SQRT_HALF) {
        m = DM_MUL(m, 2.0);
        exponent -= 1;
    }
    const double k = static_cast<double>(exponent);
    const double f = DM_SUB(m, 1.0);
    const double s = DM_DIV(f, DM_ADD(2.0, f));
    const double z = DM_MUL(s, s);
    const double w = DM_MUL(z, z);
    const double t1 = DM_MUL(w, DM_ADD(LG2, DM_MUL(w, DM_ADD(LG4, DM_MUL(w, LG6)))));
    const double t2 = DM_MUL(z, DM_ADD(LG1, DM_MUL(w, DM_ADD(LG3, DM_MUL(w, DM_ADD(LG5, DM_MUL(w, LG7)))))));
    const double r = DM_ADD(t2, t1);
    const double hfsq = DM_MUL(DM_MUL(0.5, f), f);
    return DM_SUB(DM_MUL(k, LN2_HI), DM_SUB(DM_SUB(hfsq, DM_ADD(DM_MUL(s, DM_ADD(hfsq, r)), DM_MUL(k, LN2_LO))), f));
}

// exp y (+inf past the largest double, 0 below the smallest denormal).
__device__ __forceinline__ double exp(double y) {
    if (y > EXP_OVER) return __longlong_as_double(0x7FF0000000000000LL);
    if (y < EXP_UNDER) return 0.0;
    const double k = rint(DM_MUL(y, INV_LN2));
    const double hi = DM_SUB(y, DM_MUL(k, LN2_HI));
    const double lo = DM_MUL(k, LN2_LO);
    const double r = DM_SUB(hi, lo);
    const double t = DM_MUL(r, r);
    const double c = DM_SUB(
        r, DM_MUL(t, DM_ADD(EXP_P1, DM_MUL(t, DM_ADD(EXP_P2, DM_MUL(t, DM_ADD(EXP_P3, DM_MUL(t, DM_ADD(EXP_P4, DM_MUL(t, EXP_P5))))))))));
    const double value = DM_SUB(1.0, DM_SUB(DM_SUB(lo, DM_DIV(DM_MUL(r, c), DM_SUB(2.0, c))), hi));
    return ldexp(value, static_cast<int>(k));
}

// x^p for finite x >= 0 and p > 0: exp(p log x), 0 at 0.
__device__ __forceinline__ double pow(double x, double p) {
    return x > 0.0 ? exp(DM_MUL(p, log(x))) : 0.0;
}

}  // namespace detmath

#endif  // GPU_CORE_DETMATH_CUH
