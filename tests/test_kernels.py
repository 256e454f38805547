"""Kernel exactness: narrow MMVQ vs the scalar reference (bitwise), MMQ tolerance, Q8_0 sanity."""

from __future__ import annotations

import numpy as np
import pytest

from dflash_qualify.engine._core import kernels as K

BLOCK_BYTES = 34
QK = 32
PATHS = list(K.cpu_features()["paths"])  # "scalar" always, plus what this CPU supports


@pytest.fixture(autouse=True)
def _restore_simd_path():
    yield
    assert K.set_simd_path("auto")


def _quantized(rng: np.random.Generator, n: int, k: int, scale: float = 1.0) -> np.ndarray:
    """Random rows quantized through the engine's own quantize_row_q8_0 (like activations)."""
    x = (rng.standard_normal((n, k)) * scale).astype(np.float32)
    return K.quantize_q8_0(x)


def _reference(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Y[c, n] from the scalar canonical-order reference, one vec_dot per output."""
    y = np.empty((x.shape[0], w.shape[0]), dtype=np.float32)
    for c in range(x.shape[0]):
        for n in range(w.shape[0]):
            y[c, n] = K.vec_dot_ref(w[n], x[c])
    return y


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


# --- fp16 and quantization -------------------------------------------------------------------


def test_fp16_to_fp32_matches_numpy_for_every_bit_pattern():
    h = np.arange(65536, dtype=np.uint16)
    ours = K.fp16_to_fp32(h)
    ref = h.view(np.float16).astype(np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(_bits(ours[~nan]), _bits(ref[~nan]))


def test_fp32_to_fp16_rounds_like_numpy():
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            (rng.standard_normal(20000) * 10.0 ** rng.uniform(-9, 5, 20000)).astype(np.float32),
            np.array([0.0, -0.0, 65504.0, 65520.0, 1e9, -1e9, 2.0**-24, 2.0**-25, 3 * 2.0**-26,
                      np.inf, -np.inf], dtype=np.float32),
            # every fp16 value and the exact midpoints between neighbours (ties to even)
            np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32),
        ]
    )
    halves = np.arange(0, 0x7BFF, dtype=np.uint16).view(np.float16).astype(np.float64)
    mids = ((halves[:-1] + halves[1:]) / 2).astype(np.float32)
    x = np.concatenate([x, mids, -mids])
    ours = K.fp32_to_fp16(x)
    with np.errstate(over="ignore"):  # 65520 and 1e9 overflow to inf on purpose
        expected = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(ours, expected)
    assert K.fp32_to_fp16(np.array([np.nan], dtype=np.float32))[0] & 0x7FFF > 0x7C00


def test_quantize_amax_maps_to_127_and_zero_block_is_zero():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    x[0, 5] = 9.0  # block 0 of row 0: amax at +
    x[1, 40] = -9.0  # block 1 of row 1: amax at -
    x[2, :32] = 0.0  # an all-zero block
    b = K.quantize_q8_0(x).reshape(3, 2, BLOCK_BYTES)
    qs = b[:, :, 2:].view(np.int8)
    d = b[:, :, :2].copy().view(np.uint16)[..., 0]
    assert qs[0, 0, 5] == 127
    assert qs[1, 1, 8] == -127
    assert np.all(qs[2, 0] == 0) and d[2, 0] == 0
    assert qs.min() >= -127  # never -128: the SIMD sign trick relies on it
    # dequantize round trip: |x - d*q| <= d/2 (+ fp16 rounding of d, relative 2^-11 of amax)
    back = K.dequantize_q8_0(K.quantize_q8_0(x), 64).reshape(3, 2, 32)
    amax = np.abs(x.reshape(3, 2, 32)).max(axis=2, keepdims=True)
    assert np.all(np.abs(back - x.reshape(3, 2, 32)) <= amax / 127 * 0.5 + amax * 2.0**-10)


@pytest.mark.parametrize("path", PATHS)
def test_quantize_every_path_equals_scalar_bytes(path):
    """Activation quantization is shared by q1 and bands; every SIMD path must give the scalar
    reference's bytes, including exact .5 ties (half away from zero), zero, tiny, inf and NaN."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 256)) * rng.choice([1e-30, 1e-3, 1.0, 1e4], (64, 1))).astype(np.float32)
    ties = np.arange(-127, 128, dtype=np.float32) + 0.5  # q = x/d lands on .5 with amax 127
    x[0, :32] = np.concatenate([[127.0], ties[:31]])
    x[1, :32] = np.concatenate([[-127.0], -ties[100:131]])
    x[2, :32] = 0.0
    x[3, :32] = np.float32(1e-45)  # denormal amax: d underflows to 0
    x[4, 3], x[5, 40], x[6, 70], x[7, 8] = np.inf, -np.inf, np.nan, -0.0
    assert K.set_simd_path("scalar")
    ref = K.quantize_q8_0(x)
    assert K.set_simd_path(path)
    assert np.array_equal(K.quantize_q8_0(x), ref)


def test_bindings_reject_bad_shapes_and_dtypes():
    w = np.zeros((4, BLOCK_BYTES * 2), dtype=np.uint8)
    with pytest.raises(ValueError, match="34"):
        K.mul_mat(np.zeros((4, 33), dtype=np.uint8), w[:1])
    with pytest.raises(ValueError, match="dtype"):
        K.mul_mat(w.astype(np.int16), w[:1])
    with pytest.raises(ValueError, match="same k"):
        K.mul_mat(w, np.zeros((1, BLOCK_BYTES), dtype=np.uint8))
    with pytest.raises(ValueError, match="1..8"):
        K.mul_mat(w, np.zeros((9, BLOCK_BYTES * 2), dtype=np.uint8), "mmvq")
    with pytest.raises(ValueError, match="kernel"):
        K.mul_mat(w, w[:1], "gemm")
    bad = w.copy()
    bad[0, 2] = 0x80  # quant -128
    with pytest.raises(ValueError, match="-128"):
        K.mul_mat(bad, w[:1])
    with pytest.raises(ValueError, match="multiple of 32"):
        K.quantize_q8_0(np.zeros((1, 40), dtype=np.float32))
    assert not K.set_simd_path("sse9")


# --- narrow MMVQ: bitwise equal to the reference ----------------------------------------------

# (N rows, K): ragged N, K % 32 == 0; K = 4096 takes the long-row (multi-row) MMVQ step on
# AVX2, the others its one-row step (csrc/simd/mmvq_impl.h, kSingleStreamMaxBlocks).
SHAPES = [(1, 32), (7, 64), (33, 96), (257, 160), (13, 4096)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rows,k", SHAPES)
def test_mmvq_bitwise_equals_reference_every_ncols_path_and_thread_count(path, rows, k):
    """Threads 3 splits ragged N unevenly; results must not depend on the split."""
    rng = np.random.default_rng(rows * 1000 + k)
    w = _quantized(rng, rows, k)
    x = _quantized(rng, 8, k, scale=3.0)
    ref = _reference(w, x)
    assert K.set_simd_path(path)
    for ncols in range(1, 9):
        for threads in (1, 2, 3):
            y = K.mul_mat(w, x[:ncols], "mmvq", threads)
            assert y.shape == (ncols, rows)
            assert np.array_equal(_bits(y), _bits(ref[:ncols])), (path, ncols, threads)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("k", [64, 2048])
def test_mmvq_extreme_quants_bitwise_equal_reference(path, k):
    """Every quant at +-127 drives each block's int32 sum to its largest magnitude (32 * 127 * 127)
    and the AVX2 path's int16 pairs (vpmaddubsw of |x| and the signed w) to 2 * 127 * 127;
    random signs mix positive and negative products. 11 rows: a partial 16-row x16 group."""
    rng = np.random.default_rng(k)
    signs = lambda n: np.where(rng.random((n, k)) < 0.5, -1.0, 1.0).astype(np.float32)
    w = K.quantize_q8_0(signs(9))
    same = np.ones((1, k), dtype=np.float32)
    w = np.concatenate([w, K.quantize_q8_0(same), K.quantize_q8_0(-same)])  # all +127, all -127
    x = np.concatenate([K.quantize_q8_0(signs(6)), K.quantize_q8_0(same), K.quantize_q8_0(-same)])
    for q in (w, x):  # rows of K/32 blocks: fp16 scale, then 32 int8 quants
        assert np.all(np.abs(q.reshape(len(q), -1, BLOCK_BYTES)[..., 2:].view(np.int8)) == 127)
    ref = _reference(w, x)
    assert K.set_simd_path(path)
    for ncols in range(1, 9):
        y = K.mul_mat(w, x[:ncols], "mmvq", 1)
        assert np.array_equal(_bits(y), _bits(ref[:ncols])), (path, ncols)


@pytest.mark.parametrize("path", PATHS)
def test_batched_products_equal_single_calls_bitwise(path):
    """mul_mat_batch (the grouped MoE dispatch) computes every product exactly as mul_mat does,
    whatever the mix of shapes, kernels and column counts and however the rows are split."""
    rng = np.random.default_rng(11)
    items = [(_quantized(rng, rows, k), _quantized(rng, n, k), kern)
             for rows, k, n, kern in [(33, 96, 1, "mmvq"), (1, 32, 3, "mmvq"), (257, 160, 4, "mmvq"),
                                      (13, 4096, 2, "mmvq"), (40, 64, 12, "mmq"), (7, 64, 8, "mmvq")]]
    assert K.set_simd_path(path)
    singles = [K.mul_mat(w, x, kern, 1) for w, x, kern in items]
    for threads in (1, 2, 3):
        got = K.mul_mat_batch(items, threads)
        assert len(got) == len(items)
        for y, ref in zip(got, singles):
            assert y.shape == ref.shape and np.array_equal(_bits(y), _bits(ref)), (path, threads)
    with pytest.raises(ValueError, match="mmvq takes 1..8 columns"):
        K.mul_mat_batch([(items[0][0], _quantized(rng, 9, 96), "mmvq")])


@pytest.mark.parametrize("path", PATHS)
def test_one_thread_batch_of_mixed_products_equals_single_calls_bitwise(path):
    """At one thread the batch runs wide (2..4 columns) and one-column products of mixed row
    counts (partial x16 groups) back to back, each streaming on into the next: every output keeps
    the bits of its own call."""
    rng = np.random.default_rng(12)
    shapes = [(50, 256, 4), (37, 256, 1), (20, 256, 1), (9, 256, 3), (64, 256, 1), (5, 256, 2),
              (30, 2048, 4), (30, 2048, 1), (11, 4096, 4), (11, 4096, 1), (6, 256, 1)]
    items = [(_quantized(rng, rows, k), _quantized(rng, n, k), "mmvq") for rows, k, n in shapes]
    extreme = np.zeros((8, 256), np.float32)
    extreme[:, ::2], extreme[:, 1::2] = 127.0, -127.0  # every quant at +-127
    items.append((K.quantize_q8_0(extreme), K.quantize_q8_0(-extreme[:4]), "mmvq"))
    items.append((K.quantize_q8_0(extreme), K.quantize_q8_0(extreme[:1]), "mmvq"))
    assert K.set_simd_path(path)
    singles = [K.mul_mat(w, x, kern, 1) for w, x, kern in items]
    got = K.mul_mat_batch(items, 1)
    for y, ref in zip(got, singles):
        assert y.shape == ref.shape and np.array_equal(_bits(y), _bits(ref)), path


@pytest.mark.parametrize("path", PATHS)
def test_mmvq_column_independent_of_band_position(path):
    """A column gives the same bits whether it is alone (q1) or at any slot of a band."""
    rng = np.random.default_rng(7)
    w = _quantized(rng, 45, 256)
    x = _quantized(rng, 8, 256)
    assert K.set_simd_path(path)
    alone = [K.mul_mat(w, x[c : c + 1], "mmvq")[0] for c in range(8)]
    for ncols in range(2, 9):
        band = K.mul_mat(w, x[:ncols], "mmvq", 2)
        for c in range(ncols):
            assert np.array_equal(_bits(band[c]), _bits(alone[c]))


# --- MMQ: within a derived bound, and not bitwise equal --------------------------------------


def _mmq_bound(w: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
    """Error bound for MMQ vs the reference, per output.

    Both paths compute exact integer sums (the reference one per block, isum_b = sum_j isum_bj;
    MMQ per lane j of 4 products) and the same fp32 scales s_b = fp16(wd)*fp16(xd); they differ
    only in how the products are rounded and summed (the reference one fma chain over the
    blocks; MMQ fma chains per lane, then a horizontal tree). Each path is a sum of at most
    nb*8 terms with at most nb + 3 roundings on any term's path (and sum_b |s_b isum_b| is at most
    the lane-wise sum below), so by the standard
    recursive-summation bound (Higham, Accuracy and Stability of Numerical Algorithms,
    eq. 4.4) each is within gamma_m * sum |s_b * isum_bj| of the exact sum, m = nb + 4,
    gamma_m = m*u/(1 - m*u), u = 2^-24. The two paths then differ by at most twice that.
    """
    nb = k // QK
    wb = w.reshape(w.shape[0], nb, BLOCK_BYTES)
    xb = x.reshape(x.shape[0], nb, BLOCK_BYTES)
    wq = wb[:, :, 2:].view(np.int8).astype(np.int64).reshape(w.shape[0], nb, 8, 4)
    xq = xb[:, :, 2:].view(np.int8).astype(np.int64).reshape(x.shape[0], nb, 8, 4)
    wd = wb[:, :, :2].copy().view(np.float16)[..., 0].astype(np.float32)
    xd = xb[:, :, :2].copy().view(np.float16)[..., 0].astype(np.float32)
    isum = np.einsum("nbji,cbji->cnbj", wq, xq)  # exact lane sums
    s = (xd[:, None, :] * wd[None, :, :]).astype(np.float64)  # exact in float64
    mag = np.abs(s[..., None] * isum).sum(axis=(2, 3))
    u = 2.0**-24
    m = nb + 4
    return 2 * (m * u / (1 - m * u)) * mag


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("ncols", [1, 3, 8, 13, 33])
def test_mmq_within_reassociation_bound(path, ncols):
    rng = np.random.default_rng(ncols)
    rows, k = 37, 512
    w = _quantized(rng, rows, k)
    x = _quantized(rng, ncols, k)
    ref = _reference(w, x)
    assert K.set_simd_path(path)
    y1 = K.mul_mat(w, x, "mmq", 1)
    y2 = K.mul_mat(w, x, "mmq", 2)
    assert np.array_equal(_bits(y1), _bits(y2))  # threads split rows only, MMQ included
    err = np.abs(y1.astype(np.float64) - ref.astype(np.float64))
    assert np.all(err <= _mmq_bound(w, x, k))


@pytest.mark.parametrize("path", PATHS)
def test_mmq_is_not_bitwise_equal_on_a_wide_case(path):
    """Later tests (bands past the MMVQ cap) rely on MMQ differing from the canonical order."""
    rng = np.random.default_rng(99)
    w = _quantized(rng, 64, 1024)
    x = _quantized(rng, 16, 1024)
    ref = _reference(w, x)
    assert K.set_simd_path(path)
    y = K.mul_mat(w, x, "mmq", 1)
    assert not np.array_equal(_bits(y), _bits(ref))


def test_simd_path_switch_and_features():
    feats = K.cpu_features()
    assert "scalar" in feats["paths"]
    for path in feats["paths"]:
        assert K.set_simd_path(path)
        assert K.simd_path() == path
    assert K.set_simd_path("auto")
    # the best path the CPU has, except amx, which is taken only when named (csrc/simd/mmvq_amx.cpp)
    assert K.simd_path() == [p for p in feats["paths"] if p != "amx"][-1]


@pytest.mark.parametrize("limit", [7.0, 120.0])  # 120: exp's clamp at 88 and its underflow to 0
def test_swiglu_close_to_float64_and_position_independent(limit):
    """The engine's SwiGLU (its own vectorized exp, Cephes method) is within a few ulp of a float64
    evaluation, passes the clamps, and gives each element the same bits wherever it sits (8-lane
    body or zero-padded tail), which q1 == bands relies on."""
    rng = np.random.default_rng(7)
    g = np.concatenate([rng.standard_normal(4001) * 6, rng.uniform(-110, 110, 2000),
                        [-200.0, -90.0, -88.5, -87.5, -87.2, 0.0, 7.0, 7.5, 87.2, 87.5, 100.0]]).astype(np.float32)
    u = (rng.standard_normal(g.size) * 5).astype(np.float32)
    h = K.swiglu(g, u, limit)
    gi = np.minimum(g.astype(np.float64), limit)
    ref = gi / (1.0 + np.exp(-gi)) * np.clip(u.astype(np.float64), -limit, limit)
    ok = np.abs(ref) > 1e-30
    rel = np.abs(h[ok] - ref[ok]) / np.abs(ref[ok])
    assert rel.max() < 4e-7  # a few fp32 ulp (exp ~1 ulp, then one add, one divide, one multiply)
    assert np.all(np.abs(h[~ok]) < 1e-30)
    for start, n in [(0, 1), (3, 5), (5, 8), (9, 17), (100, 31)]:  # tails and bodies at other offsets
        part = K.swiglu(g[start:start + n].copy(), u[start:start + n].copy(), limit)
        assert part.tobytes() == h[start:start + n].tobytes()
    assert np.isnan(K.swiglu(np.array([np.nan], np.float32), np.array([1.0], np.float32), limit)[0])
    with pytest.raises(ValueError, match="gate: expected dtype float32"):
        K.swiglu(np.zeros(4), np.zeros(4, np.float32), limit)
