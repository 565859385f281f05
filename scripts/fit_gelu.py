#!/usr/bin/env python3
"""Refits the float32 gelu / gelu_backward polynomials of src/kernels/functors.h.

Needs numpy and mpmath (pip; not dependencies of ember). Prints the coefficients and the fit
errors quoted in the header's comments:
  R(w) = N(u) / w, w = u / (u + 2): degree 11 in w - w0, minimax of relative error (gelu);
  M(u), w = u / (u + 3): degree 9 in w - w0, minimax of absolute error over M + u/sqrt(2 pi)
      (gelu_backward; w0 near the root of M(u) - u/sqrt(2 pi));
  q(r) = (exp(r) - 1 - r) / r^2 on [ln 3/4, ln 3/2]: degree 4, minimax of r^2 q's absolute error.
with N(u) = u exp(u^2/2) Phi(-u) and M(u) = exp(u^2/2) Phi(-u), u in [0, 14.5]. Minimax is
approximated by Lawson's iteratively reweighted least squares; coefficients are rounded to float
one at a time from the constant up, refitting the rest after each. w0 is moved by a few float
steps so that the polynomial's constant term is a float almost exactly. Takes about two minutes;
the output matches the header's constants digit for digit.

  python3 scripts/fit_gelu.py
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 40
U_MAX = 14.5  # gelu(-u) rounds to -0 from here (below half the least subnormal); the header clamps at 15
C = 1 / np.sqrt(2 * np.pi)
# Centres of the two fits. They were chosen by trying targets near w = 0.625 (gelu) and near the
# root of M - c u (gelu_backward, w = 0.2004) and keeping the one whose coefficients gave the
# smallest exhaustive float error in the header's evaluation; the fit is sensitive to them in the
# last bits of the coefficients only.
W0_GELU = 6.250433326e-01
W0_BWD = 2.004342675e-01


def mills(u):  # M(u) = exp(u^2/2) Phi(-u)
    u = mp.mpf(u)
    return mp.exp(u * u / 2) * mp.erfc(u / mp.sqrt(2)) / 2


def lawson(V, y, weight, iters=300):
    """Coefficients c minimizing max |(V c - y) weight| (approximately), and that maximum."""
    lw = np.ones_like(y) / len(y)
    for _ in range(iters):
        sw = np.sqrt(lw) * weight
        c, *_ = np.linalg.lstsq(V * sw[:, None], y * sw, rcond=None)
        e = (V @ c - y) * weight
        lw = lw * np.abs(e) + 1e-300
        lw /= lw.sum()
    return c, np.max(np.abs(e))


def fit_float(x, y, deg, weight, c0):
    """Degree-deg fit in x with constant c0 (a float), the others rounded to float in turn."""
    V = np.vander(x, deg + 1, increasing=True)
    fixed = {0: c0}
    for j in range(1, deg + 1):
        free = [i for i in range(deg + 1) if i not in fixed]
        rest = y - sum(V[:, i] * fixed[i] for i in fixed)
        c, _ = lawson(V[:, free], rest, weight)
        fixed[j] = float(np.float32(c[free.index(j)]))
    c = np.array([fixed[i] for i in range(deg + 1)])
    return c, np.max(np.abs((V @ c - y) * weight))


def snap_w0(f, w0, steps=16):
    """A float w0' near w0 where f(w0') is within a tiny fraction of an ulp of a float."""
    best = None
    for k in range(-steps, steps):
        w = float(np.float32(w0) + np.float32(k) * np.float32(2.0**-24))
        v = f(w)
        rel = abs(float((v - float(np.float32(float(v)))) / v))
        if best is None or rel < best[0]:
            best = (rel, w, float(np.float32(float(v))))
    return best[1], best[2]


def show(name, c, err, log2=True):
    print("%s: error 2^%.2f" % (name, np.log2(err)))
    print("  " + ", ".join("%.9ef" % np.float32(v) for v in c))


us = np.unique(np.concatenate([np.linspace(0, U_MAX, 3000), np.geomspace(1e-6, U_MAX, 1000)]))
mv = np.array([float(mills(u)) for u in us])

# gelu: R(w) / 2 is what the header evaluates (the factor is 2w); fitting R, halving exactly.
w = us / (us + 2)
w0, c0 = snap_w0(lambda x: (2 * x / (1 - x) + 2) * mills(2 * x / (1 - x)) / 2, W0_GELU)
c, err = fit_float(w - w0, mv * (us + 2) / 2, 11, 1 / (mv * (us + 2) / 2), c0)
print("kGeluW0 = %.9ef" % w0)
show("R/2 (gelu, relative)", c, err)

# gelu_backward: M in w = u / (u + 3), centred on the root of M(u) - c u.
root = float(mp.findroot(lambda u: mills(u) - u / mp.sqrt(2 * mp.pi), 0.75))
w = us / (us + 3)
w0, c0 = snap_w0(lambda x: mills(3 * x / (1 - x)), W0_BWD)
c, err = fit_float(w - w0, mv, 9, 1 / (mv + C * us), c0)
print("kGeluBwdW0 = %.9ef (root of M - c u at u = %.6f)" % (w0, root))
show("M (gelu_backward, absolute over M + c u)", c, err)

# exp: q(r) with r in [ln 3/4, ln 3/2] (the biased reduction).
r = np.linspace(np.log(0.75) - 0.002, np.log(1.5) + 0.002, 6001)
r = r[np.abs(r) > 1e-7]
qv = np.array([float((mp.exp(mp.mpf(x)) - 1 - mp.mpf(x)) / mp.mpf(x) ** 2) for x in r])
c, _ = lawson(np.vander(r, 5, increasing=True), qv, r**2, iters=2000)
c = c.astype(np.float32).astype(np.float64)
show("q (exp tail, absolute of r^2 q)", c, np.max(np.abs((np.vander(r, 5, increasing=True) @ c - qv) * r**2)))
