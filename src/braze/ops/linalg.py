"""Contractions: ``matmul`` (NumPy's rules, batch broadcasting) and ``einsum``.

``dot``, ``outer``, ``tensordot``-style calls are written with these in
``braze.numpy``. Targets call BLAS for them.
"""
from __future__ import annotations

import functools

import numpy as np

from ..aval import Aval, is_ndarray
from ..core import bind, declare
from ..errors import GradientError, LinAlgShapeError, ShapeError, UnsupportedOpError, where
from ._util import dtype_error
from .reduce import reduce_sum
from .shape import broadcast_to, dtype_of, reshape, shape_of, transpose


@functools.lru_cache(maxsize=256)
def _matmul_dtype(a, b):
    return np.matmul(np.array([[1]], a), np.array([[1]], b)).dtype


def _matmul_abstract(a: Aval, b: Aval):
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(
            f"matmul: operands {a} and {b} must be at least 1-D{where()}; multiply by a scalar with *"
        )
    ashape = (1,) + a.shape if a.ndim == 1 else a.shape
    bshape = b.shape + (1,) if b.ndim == 1 else b.shape
    if ashape[-1] != bshape[-2]:
        raise ShapeError(
            f"matmul: contraction dimensions differ: {a} @ {b} contracts {ashape[-1]} with "
            f"{bshape[-2]}{where()}; the last axis of the left operand must equal the "
            "second-to-last of the right (transpose one with .T?)"
        )
    try:
        batch = tuple(np.broadcast_shapes(ashape[:-2], bshape[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions of {a} and {b} do not broadcast{where()}") from None
    shape = batch + (ashape[-2],) * (a.ndim > 1) + (bshape[-1],) * (b.ndim > 1)
    try:
        dtype = _matmul_dtype(a.dtype, b.dtype)
    except TypeError as exc:
        raise dtype_error("matmul", (a, b), exc) from None
    return Aval(shape, dtype)


def parse_einsum(subscripts: str) -> tuple[list[str], str]:
    lhs, out = subscripts.split("->")
    return lhs.split(","), out


def _einsum_abstract(*xs: Aval, subscripts):
    ins, out = parse_einsum(subscripts)
    sizes: dict[str, int] = {}
    for spec, x in zip(ins, xs):
        if len(spec) != x.ndim:
            raise ShapeError(f"einsum: subscripts {spec!r} do not match operand {x}{where()}")
        for letter, dim in zip(spec, x.shape):
            if sizes.setdefault(letter, dim) != dim:
                raise ShapeError(
                    f"einsum {subscripts!r}: index {letter!r} has sizes {sizes[letter]} and {dim} "
                    f"in operands {', '.join(map(str, xs))}{where()}"
                )
    samples = [np.array(1, x.dtype).reshape((1,) * x.ndim) for x in xs]
    try:
        dtype = np.einsum(subscripts, *samples).dtype
    except TypeError as exc:
        raise dtype_error("einsum", xs, exc) from None
    return Aval(tuple(sizes[c] for c in out), dtype)


def _einsum_impl(*xs, subscripts):
    result = np.einsum(subscripts, *xs, optimize=True)
    # (a full contraction through optimize's BLAS path is a 0-d array; NumPy's einsum gives a scalar)
    return result[()] if isinstance(result, np.ndarray) and result.ndim == 0 else result


def matmul(a, b):
    return bind("matmul", a, b)


def einsum(subscripts, *xs):
    return bind("einsum", *xs, subscripts=subscripts)


def _swap_last(x):
    nd = len(shape_of(x))
    return transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _matmul_vjp(ct, a, b, *, out, wants):
    a_shape, b_shape = shape_of(a), shape_of(b)
    a2 = reshape(a, (1,) + a_shape) if len(a_shape) == 1 else a
    b2 = reshape(b, b_shape + (1,)) if len(b_shape) == 1 else b
    ct2 = ct
    if len(a_shape) == 1:  # (the missing row axis of a 1-d left operand)
        s = shape_of(ct2)
        ct2 = reshape(ct2, s[:-1] + (1,) + s[-1:]) if len(b_shape) > 1 else reshape(ct2, s + (1,))
    if len(b_shape) == 1:
        ct2 = reshape(ct2, shape_of(ct2) + (1,))
    da = matmul(ct2, _swap_last(b2)) if wants[0] else None
    db = matmul(_swap_last(a2), ct2) if wants[1] else None
    if da is not None and len(a_shape) == 1:
        nd = len(shape_of(da))
        da = reshape(reduce_sum(da, tuple(range(nd - 2))) if nd > 2 else da, a_shape)
    if db is not None and len(b_shape) == 1:
        db = reduce_sum(db, (len(shape_of(db)) - 1,))
    return da, db


def _einsum_vjp(ct, *xs, out, subscripts, wants):
    ins, out_spec = parse_einsum(subscripts)
    cts = []
    for k, (spec, x) in enumerate(zip(ins, xs)):
        if not wants[k]:
            cts.append(None)
            continue
        if len(set(spec)) != len(spec):
            raise UnsupportedOpError(
                f"einsum {subscripts!r}: the gradient of an operand with a repeated index ({spec!r}, "
                f"a diagonal) is not supported{where()}; write the diagonal with indexing instead"
            )
        others = [(s, o) for j, (s, o) in enumerate(zip(ins, xs)) if j != k]
        available = set(out_spec).union(*[set(s) for s, _ in others]) if others else set(out_spec)
        result_spec = "".join(c for c in spec if c in available)
        specs = ",".join([out_spec] + [s for s, _ in others])
        g = einsum(f"{specs}->{result_spec}", ct, *[o for _, o in others])
        if result_spec != spec:  # letters only this operand had: summed, so broadcast back
            shape = tuple(d if c in available else 1 for c, d in zip(spec, shape_of(x)))
            g = broadcast_to(reshape(g, shape), shape_of(x))
        cts.append(g)
    return tuple(cts)


def _c_order(strides, avals, params, aval):
    from .. import layout

    return layout.c_strides(aval.shape)


def _matmul_impl(a, b):
    """``np.matmul``, with an operand that repeats one value along an axis (a
    zero stride: ``np.ones(n)`` traced as a broadcast constant) made dense
    first: BLAS cannot read it, and NumPy's own loop ran a 500x500 matrix by
    such a vector in 210 us against BLAS's 26 us."""
    if is_ndarray(a) and a.size > 1 and 0 in a.strides:
        a = np.ascontiguousarray(a)
    if is_ndarray(b) and b.size > 1 and 0 in b.strides:
        b = np.ascontiguousarray(b)
    return np.matmul(a, b)


declare("matmul", "linalg", abstract=_matmul_abstract, impl=_matmul_impl, vjp=_matmul_vjp, wants=True,
        strides=_c_order)
declare("einsum", "linalg", abstract=_einsum_abstract, impl=_einsum_impl, vjp=_einsum_vjp, wants=True)


# ---------------------------------------------------------------- LAPACK: inv, solve, det, slogdet, cholesky
# Externs that call NumPy's LAPACK routines on every target, with the standard
# VJP rules (as in jax.numpy.linalg). Batched over leading axes as NumPy is.


def _square(func, a: Aval) -> None:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise LinAlgShapeError(f"{func}: last 2 dimensions of the array must be square, got {a}{where()}")
    if np.dtype(a.dtype).kind not in "biuf":
        raise dtype_error(func, (a,), TypeError(f"{func} of {a.dtype}"))


def _inexact(dtype) -> np.dtype:
    return np.result_type(dtype, np.float64) if np.dtype(dtype).kind in "biu" else np.dtype(dtype)


def _inv_abstract(a: Aval):
    _square("inv", a)
    return Aval(a.shape, _inexact(a.dtype))


def _inv_vjp(ct, a, *, out):
    t = _swap_last(out)
    return (-matmul(matmul(t, ct), t),)


def _solve_abstract(a: Aval, b: Aval):
    _square("solve", a)
    vector = b.ndim == 1
    if (b.shape[0] if vector else b.shape[-2]) != a.shape[-1]:
        raise ShapeError(f"solve: {a} and {b} do not fit (a x = b needs b's rows to be a's columns){where()}")
    dtype = np.result_type(_inexact(a.dtype), _inexact(b.dtype))
    if vector:
        return Aval(a.shape[:-1], dtype)
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return Aval(batch + b.shape[-2:], dtype)


def _solve_vjp(ct, a, b, *, out, wants):
    gb = solve(_swap_last(a), ct)  # a^-T ct
    ga = None
    if wants[0]:
        if len(shape_of(out)) == 1:
            ga = -einsum("i,j->ij", gb, out)
        else:
            ga = -matmul(gb, _swap_last(out))
            ga = _sum_to(ga, shape_of(a))
    if wants[1]:
        gb = _sum_to(gb, shape_of(b))
    return ga, (gb if wants[1] else None)


def _sum_to(x, shape):
    extra = len(shape_of(x)) - len(shape)
    if extra > 0:
        x = reduce_sum(x, tuple(range(extra)))
    axes = tuple(i for i, (d, s) in enumerate(zip(shape_of(x), shape)) if s == 1 and d != 1)
    if axes:
        x = reshape(reduce_sum(x, axes), shape)
    return x


def _det_abstract(a: Aval):
    _square("det", a)
    return Aval(a.shape[:-2], _inexact(a.dtype))


def _det_vjp(ct, a, *, out):
    scale = reshape(ct * out, shape_of(out) + (1, 1))
    return (scale * _swap_last(inv(a)),)


def _slogdet_abstract(a: Aval, *, part):
    _square("slogdet", a)
    return Aval(a.shape[:-2], _inexact(a.dtype))


def _slogdet_impl(a, *, part):
    sign, logabs = np.linalg.slogdet(a)
    return sign if part == "sign" else logabs


def _slogdet_vjp(ct, a, *, out, part):
    if part == "sign":
        return (None,)  # piecewise constant
    return (reshape(ct, shape_of(ct) + (1, 1)) * _swap_last(inv(a)),)


def _cholesky_abstract(a: Aval):
    _square("cholesky", a)
    return Aval(a.shape, _inexact(a.dtype))


def _cholesky_vjp(ct, a, *, out):
    """NumPy's cholesky reads the lower triangle of ``a`` only: the gradient is
    Murray's (2016) symmetric one, G = L^-T Phi(L^T ct) L^-1 symmetrized, folded
    onto the lower triangle (an entry below the diagonal stands for two)."""
    from .elementwise import where as where_

    n = shape_of(a)[-1]
    lower, diag = np.tril(np.ones((n, n), bool)), np.eye(n, dtype=bool)
    zero = np.zeros((), dtype_of(out))
    linv = inv(out)
    p = matmul(_swap_last(out), ct)
    p = where_(diag, p * 0.5, where_(lower, p, zero))  # Phi: the lower triangle, half the diagonal
    g = matmul(matmul(_swap_last(linv), p), linv)
    sym = (g + _swap_last(g)) * 0.5
    return (where_(diag, sym, where_(lower, sym * 2.0, zero)),)


def inv(a):
    return bind("inv", a)


def solve(a, b):
    return bind("solve", a, b)


declare("inv", "linalg", abstract=_inv_abstract, impl=np.linalg.inv, vjp=_inv_vjp)
declare("solve", "linalg", abstract=_solve_abstract, impl=np.linalg.solve, vjp=_solve_vjp, wants=True)
declare("det", "linalg", abstract=_det_abstract, impl=np.linalg.det, vjp=_det_vjp)
declare("slogdet", "linalg", abstract=_slogdet_abstract, impl=_slogdet_impl, vjp=_slogdet_vjp)
declare("cholesky", "linalg", abstract=_cholesky_abstract, impl=np.linalg.cholesky, vjp=_cholesky_vjp)


# ---------------------------------------------------------------- LAPACK: qr, eigh, svd
# Decompositions with several results (read through ``pick`` nodes). Their VJP
# rules receive the cotangents and values of all results as tuples. The rules
# are written with NumPy calls, which braze traces when the values are traced.


def _batch_matrix(func, a: Aval):
    if a.ndim < 2:
        raise ShapeError(f"{func}: {a.ndim}-dimensional array given; the array must be at least "
                         f"two-dimensional{where()}")
    if np.dtype(a.dtype).kind not in "biuf":
        raise dtype_error(func, (a,), TypeError(f"{func} of {a.dtype}"))
    return a.shape[:-2], a.shape[-2], a.shape[-1], _inexact(a.dtype)


def _qr_abstract(a: Aval, *, mode):
    batch, m, n, dtype = _batch_matrix("qr", a)
    k = min(m, n)
    r = Aval(batch + ((m if mode == "complete" else k), n), dtype)
    if mode == "r":
        return r
    return Aval(batch + (m, m if mode == "complete" else k), dtype), r


def _qr_impl(a, *, mode):
    result = np.linalg.qr(a, mode=mode)
    return result if mode == "r" else (result.Q, result.R)


def _mT(x):
    return np.swapaxes(x, -1, -2)


def _qr_vjp(ct, a, *, out, mode):
    """The QR rule of Walter & Lehmann (2018), as JAX and PyTorch use it; a wide
    ``a`` = [X | Y] differentiates X = Q U as a square QR and Y = Q V linearly."""
    m, n = shape_of(a)[-2:]
    if mode == "complete" and m > n:
        raise GradientError(f"qr: no gradient for mode='complete' of a tall {m}x{n} matrix (Q's last "
                            f"{m - n} columns are not unique){where()}; use mode='reduced'")
    if mode == "r":
        q, r = bind("qr", a, mode="reduced")
        gq, gr = np.zeros_like(q), ct
    else:
        (q, r), (gq, gr) = out, ct
    if m >= n:
        return (_qr_tall_vjp(q, r, gq, gr),)
    y, u, v, gu, gv = a[..., :, m:], r[..., :, :m], r[..., :, m:], gr[..., :, :m], gr[..., :, m:]
    gx = _qr_tall_vjp(q, u, gq + np.matmul(y, _mT(gv)), gu)
    return (np.concatenate([gx, np.matmul(q, gv)], axis=-1),)


def _qr_tall_vjp(q, r, gq, gr):
    k = shape_of(r)[-2]
    lower = np.tril(np.ones((k, k), bool), -1)
    mm = np.matmul(r, _mT(gr)) - np.matmul(_mT(gq), q)
    strict = np.where(lower, mm, 0.0)
    sym = strict + _mT(strict) + np.where(np.eye(k, dtype=bool), mm, 0.0)  # copy the lower triangle up
    b = gq + np.matmul(q, sym)
    return _mT(solve(r, _mT(b)))  # b R^-T (R is square and upper triangular here)


def _eigh_abstract(a: Aval, *, UPLO, vectors):
    _square("eigh" if vectors else "eigvalsh", a)
    dtype = _inexact(a.dtype)
    w = Aval(a.shape[:-1], dtype)
    return (w, Aval(a.shape, dtype)) if vectors else w


def _eigh_impl(a, *, UPLO, vectors):
    return tuple(np.linalg.eigh(a, UPLO)) if vectors else np.linalg.eigvalsh(a, UPLO)


def _off_diagonal_inverse(d, eye):
    """1 / d off the diagonal, 0 on it (d is a difference of eigen- or singular values)."""
    return np.where(eye, 0.0, 1.0 / np.where(eye, 1.0, d))


def _eigh_vjp(ct, a, *, out, UPLO, vectors):
    """G = V (diag(gw) + F o (V^T gV)) V^T, F_ij = 1 / (w_j - w_i); NumPy reads
    one triangle of ``a``, so G is folded onto it (an entry off the diagonal
    stands for two)."""
    if vectors:
        (w, v), (gw, gv) = out, ct
    else:
        (w, v), gw, gv = bind("eigh", a, UPLO=UPLO, vectors=True), ct, None
    n = shape_of(a)[-1]
    eye = np.eye(n, dtype=bool)
    inner = np.where(eye, gw[..., None, :], 0.0)
    if gv is not None:
        f = _off_diagonal_inverse(w[..., None, :] - w[..., :, None], eye)
        inner = inner + f * np.matmul(_mT(v), gv)
    return (_fold_triangle(np.matmul(np.matmul(v, inner), _mT(v)), UPLO == "L"),)


def _fold_triangle(g, lower: bool):
    n = shape_of(g)[-1]
    strict = np.tril(np.ones((n, n), bool), -1) if lower else np.triu(np.ones((n, n), bool), 1)
    eye = np.eye(n, dtype=bool)
    return np.where(eye, g, np.where(strict, g + _mT(g), 0.0))


def _svd_abstract(a: Aval, *, full_matrices, compute_uv, hermitian):
    batch, m, n, dtype = _batch_matrix("svd", a)
    if hermitian:
        _square("svd", a)
    k = min(m, n)
    s = Aval(batch + (k,), dtype)
    if not compute_uv:
        return s
    u = Aval(batch + (m, m if full_matrices else k), dtype)
    vh = Aval(batch + (n if full_matrices else k, n), dtype)
    return u, s, vh


def _svd_impl(a, *, full_matrices, compute_uv, hermitian):
    result = np.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv, hermitian=hermitian)
    return tuple(result) if compute_uv else result


def _svd_vjp(ct, a, *, out, full_matrices, compute_uv, hermitian):
    """Townsend (2016): U [F o (U^T gU - gU^T U) S + diag(gs) + S F o (V^T gV - gV^T V)] V^T
    + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T), F_ij = 1 / (s_j^2 - s_i^2)."""
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    if not compute_uv:
        (u, s, vh), gs, gu, gvh = bind("svd", a, full_matrices=False, compute_uv=True, hermitian=hermitian), ct, \
            None, None
    else:
        if full_matrices and m != n:
            raise GradientError(f"svd: no gradient with full_matrices=True of a non-square {m}x{n} matrix (the "
                                f"extra singular vectors are not unique){where()}; use full_matrices=False")
        (u, s, vh), (gu, gs, gvh) = out, ct
    eye = np.eye(k, dtype=bool)
    inner = np.where(eye, gs[..., None, :], 0.0)
    s2 = s * s
    f = _off_diagonal_inverse(s2[..., None, :] - s2[..., :, None], eye)
    v = _mT(vh)
    g = 0.0
    if gu is not None:
        ugu = np.matmul(_mT(u), gu)
        inner = inner + f * (ugu - _mT(ugu)) * s[..., None, :]
        if m > k:
            g = np.matmul((gu - np.matmul(u, ugu)) / s[..., None, :], vh)
    if gvh is not None:
        gv = _mT(gvh)
        vgv = np.matmul(vh, gv)
        inner = inner + s[..., :, None] * (f * (vgv - _mT(vgv)))
        if n > k:
            g = g + np.matmul(u, (gvh - np.matmul(np.matmul(gvh, v), vh)) / s[..., :, None])
    return (np.matmul(np.matmul(u, inner), vh) + g,)


declare("qr", "linalg", abstract=_qr_abstract, impl=_qr_impl, vjp=_qr_vjp)
declare("eigh", "linalg", abstract=_eigh_abstract, impl=_eigh_impl, vjp=_eigh_vjp)
declare("svd", "linalg", abstract=_svd_abstract, impl=_svd_impl, vjp=_svd_vjp)


def lstsq_vjp(ct, a, b, *rcond, out, **kwargs):
    """x = (A^T A)^-1 A^T b for a full-column-rank ``a`` (m >= n); the residuals
    are the minimum of |b - A x|^2, whose derivative is the envelope's
    (-2 r x^T, 2 r); the singular values are the SVD's."""
    gx, gres, _, gs = ct
    m, n = np.shape(a)
    if m < n:
        raise GradientError(f"numpy.linalg.lstsq: no gradient for an underdetermined {m}x{n} system (its "
                            f"minimum-norm solution is not differentiated){where()}")
    x = out[0]
    vector = np.ndim(b) == 1
    x2, b2 = (x[:, None], b[:, None]) if vector else (x, b)
    ga = gb = None
    if gx is not None or gres is not None:
        r = b2 - np.matmul(a, x2)
        ga, gb = 0.0, 0.0
        if gx is not None:
            z = np.linalg.solve(np.matmul(a.T, a), gx[:, None] if vector else gx)
            az = np.matmul(a, z)
            ga = np.matmul(r, z.T) - np.matmul(az, x2.T)
            gb = az
        if gres is not None and np.shape(out[1])[0] > 0:
            rg = r * (2.0 * gres)
            ga = ga - np.matmul(rg, x2.T)
            gb = gb + rg
        gb = gb[:, 0] if vector else gb
    if gs is not None:
        u, _, vh = np.linalg.svd(a, full_matrices=False)
        gsv = np.matmul(u * gs, vh)
        ga = gsv if ga is None else ga + gsv
    return (ga, gb) + (None,) * len(rcond)

