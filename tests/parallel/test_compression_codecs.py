"""The compression codecs without Dask: ranks are threads over ``ThreadTransport``.

fp16/bf16 (bf16's rounding against a reference, identical bytes, half the traffic), the loss
scaler's state machine, top-k and PowerSGD error feedback (nothing lost: what was sent plus the
residual is the sum of the gradients), PowerSGD exact for a rank-r sum, the push API a
parameter server can use, and the uncompressed byte counts against the collectives' own.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tests.parallel.ranks import on_ranks
from workbench.parallel.collectives import ThreadTransport, allreduce, plan_buckets
from workbench.parallel.collectives.compression import (
    COMPRESSION_FORMS,
    CompressionError,
    DynamicLossScaler,
    PushEncoder,
    bucket_codec,
    decode,
    dense_allreduce_bytes,
    from_bfloat16_bits,
    half_precision_allreduce,
    parse_compression,
    receive_payload,
    send_payload,
    to_bfloat16_bits,
)
from workbench.parallel.collectives.compression.power_sgd import (
    PowerSgdFactors,
    orthogonalize,
)
from workbench.parallel.collectives.compression.top_k import (
    TopKSelector,
    sparse_allgather_sum,
    top_k_count,
)

ALGORITHMS = ["ring", "hierarchical-copy", "reduce-to-one"]


def dense(algorithm, groups=((0,), (1,))):
    return lambda transport, array, key: allreduce(transport, array, key, algorithm, groups)


# --- the flag's values -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("none", "none"),
        ("fp16", "fp16"),
        ("float16", "fp16"),
        ("bf16", "bf16"),
        ("topk:0.01", "topk:0.01"),
        ("topk:1", "topk:1.0"),
        ("topk:1e-3", "topk:0.001"),
        ("powersgd:2", "powersgd:2"),
        (" powersgd:16 ", "powersgd:16"),
    ],
)
def test_compression_values_parse_to_their_canonical_form(text, canonical):
    assert parse_compression(text).text == canonical
    assert parse_compression(canonical).text == canonical


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("topk:2", "RATIO must be a number in (0, 1], got 2"),
        ("topk:0", "RATIO must be a number in (0, 1], got 0"),
        ("topk:-0.1", "(0, 1]"),
        ("topk:nan", "(0, 1]"),
        ("topk:", "got nothing"),
        ("topk", "topk needs its argument, like topk:0.01"),
        ("powersgd:0", "RANK must be an integer >= 1, got 0"),
        ("powersgd:1.5", "RANK must be an integer >= 1, got 1.5"),
        ("powersgd", "powersgd:2"),
        ("fp16:3", "unknown compression 'fp16:3'"),
        ("int8", "unknown compression 'int8'"),
        ("", "unknown compression ''"),
    ],
)
def test_malformed_compression_values_name_the_forms(text, fragment):
    with pytest.raises(CompressionError) as raised:
        parse_compression(text)
    assert fragment in str(raised.value)
    assert COMPRESSION_FORMS in str(raised.value)


# --- fp16 and bf16 ---------------------------------------------------------------------------


def _bfloat16_reference(value: np.float32) -> np.float32:
    """The nearest bfloat16 (ties to even), chosen between the two candidates around
    ``value``'s magnitude in exact float64 arithmetic."""
    if not np.isfinite(value):
        return value
    bits = int(np.array(value, np.float32).view(np.uint32))
    sign, magnitude = bits & 0x80000000, bits & 0x7FFFFFFF
    low = magnitude & 0xFFFF0000
    high = low + 0x10000  # 0x7F800000 is inf: past the largest, rounding overflows to it

    def as_float(pattern: int) -> float:
        return float(np.array(pattern, np.uint32).view(np.float32))

    exact = float(abs(value))
    below = exact - as_float(low)
    above = (2.0**128 if high == 0x7F800000 else as_float(high)) - exact
    chosen = low if below < above or (below == above and not (low >> 16) & 1) else high
    return np.array(sign | chosen, np.uint32).view(np.float32)


def test_bfloat16_rounds_to_nearest_even_like_a_reference():
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            rng.normal(size=5000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 5000),
            # Exact ties between two bfloat16 values, half of them onto an odd neighbour.
            (np.arange(1, 200, dtype=np.uint32) << 16 | 0x8000).view(np.float32),
            np.array([0.0, -0.0, 1.0, -2.5, 3.4028235e38, -3.4028235e38, 1e-40, -1e-45]),
            np.array([np.inf, -np.inf], np.float32),
        ]
    ).astype(np.float32)
    got = from_bfloat16_bits(to_bfloat16_bits(values))
    expected = np.array([_bfloat16_reference(v) for v in values], np.float32)
    np.testing.assert_array_equal(got, expected)
    assert to_bfloat16_bits(values).dtype == np.uint16
    finite = np.isfinite(values) & (np.abs(values) > 1e-37) & (np.abs(values) < 3e38)
    relative = np.abs(got[finite] - values[finite]) / np.abs(values[finite])
    assert relative.max() <= 2.0**-8  # half a unit in the last of 8 mantissa bits


def test_bfloat16_keeps_nan_and_float32_range():
    bits = to_bfloat16_bits(np.array([np.nan, -np.nan, 1e38, 3.4e38], np.float32))
    values = from_bfloat16_bits(bits)
    assert np.isnan(values[:2]).all()
    assert np.isfinite(values[2]) and values[2] == pytest.approx(1e38, rel=2**-8)
    assert np.isinf(values[3])  # beyond bfloat16's largest finite value


@pytest.mark.parametrize("method", ["fp16", "bf16"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("size", [2, 3, 4])
def test_half_precision_all_reduce_halves_the_bytes_and_keeps_ranks_identical(
    method, algorithm, size
):
    rng = np.random.default_rng(size)
    inputs = [rng.normal(size=1000).astype(np.float32) for _ in range(size)]
    groups = [list(range(size // 2)), list(range(size // 2, size))]

    def work(rank, transport):
        return half_precision_allreduce(
            dense(algorithm, groups), transport, inputs[rank], "c", method
        )

    results, transports = on_ranks(size, work)
    assert all(r.dtype == np.float32 and r.tobytes() == results[0].tobytes() for r in results)
    tolerance = 2e-2 if method == "bf16" else 2e-3
    np.testing.assert_allclose(results[0], np.sum(inputs, axis=0), rtol=tolerance, atol=tolerance)
    for rank, transport in enumerate(transports):
        full = dense_allreduce_bytes(algorithm, groups, 1000, 4, rank, size)
        assert transport.bytes_sent * 2 == full


# --- dynamic loss scaling --------------------------------------------------------------------


def test_the_loss_scaler_halves_on_overflow_and_doubles_after_good_steps():
    scaler = DynamicLossScaler()
    assert (scaler.scale, scaler.growth_interval) == (2.0**16, 2000)
    assert scaler.update(False) is False and scaler.scale == 2.0**15
    assert scaler.update(False) is False and scaler.scale == 2.0**14
    for _ in range(1999):
        assert scaler.update(True) is True
    assert scaler.scale == 2.0**14 and scaler.good_steps == 1999
    assert scaler.update(True) and scaler.scale == 2.0**15 and scaler.good_steps == 0
    assert scaler.update(False) is False and scaler.good_steps == 0
    assert scaler.skipped_steps == 3


def test_the_loss_scaler_stops_shrinking_at_float16s_smallest_step():
    scaler = DynamicLossScaler(scale=1.0)
    for _ in range(100):
        scaler.update(False)
    assert scaler.scale == 2.0**-24 and scaler.skipped_steps == 100


def test_an_infinite_gradient_makes_every_ranks_sum_non_finite_and_the_scale_is_undone():
    shapes = {"w": (8, 4), "b": (4,)}
    buckets = plan_buckets(shapes, 4)
    rng = np.random.default_rng(1)
    # Below 65504 / 2**16 / 2 = 0.5 each: the scaled sum fits float16.
    gradients = [rng.uniform(-0.4, 0.4, size=36).astype(np.float32) for _ in range(2)]

    def work(rank, transport):
        codec = bucket_codec(parse_compression("fp16"), transport, dense("ring"), buckets, 0.5, 0)
        first = codec.reduce(gradients[rank].copy(), "s0", 0)
        poisoned = gradients[rank].copy()
        if rank == 0:
            poisoned[...] = np.inf
        return first, codec.reduce(poisoned, "s1", 0)

    results, _ = on_ranks(2, work)
    for first, second in results:
        # Scaled by 2**16 before the cast, divided after: close to the sum, not 2**16 times it.
        np.testing.assert_allclose(first, gradients[0] + gradients[1], rtol=1e-3, atol=1e-4)
        assert not np.isfinite(second).all()
    assert results[0][0].tobytes() == results[1][0].tobytes()


# --- top-k -----------------------------------------------------------------------------------


def test_top_k_error_feedback_loses_nothing():
    rng = np.random.default_rng(2)
    selector = TopKSelector(0.05)
    # Integer-valued float64: every sum below is exact, so the invariant holds bit for bit.
    gradients = [rng.integers(-1000, 1000, size=200).astype(np.float64) for _ in range(30)]
    sent = np.zeros(200)
    for gradient in gradients:
        indices, values = selector.select("w", gradient)
        assert len(indices) == top_k_count(0.05, 200) == 10
        assert np.all(np.diff(indices) > 0)
        sent[indices] += values
    np.testing.assert_array_equal(sent + selector.residuals["w"], np.sum(gradients, axis=0))


def test_top_k_sends_the_largest_magnitudes_of_gradient_plus_residual():
    selector = TopKSelector(0.5)
    indices, values = selector.select(0, np.array([1.0, -5.0, 2.0, 0.5]))
    assert indices.tolist() == [1, 2] and values.tolist() == [-5.0, 2.0]
    np.testing.assert_array_equal(selector.residuals[0], [1.0, 0.0, 0.0, 0.5])
    indices, values = selector.select(0, np.array([0.1, 0.0, 0.0, 1.0]))
    assert indices.tolist() == [0, 3] and values.tolist() == [1.1, 1.5]


@pytest.mark.parametrize("size", [2, 3, 4])
def test_top_k_all_gather_gives_every_rank_the_same_dense_sum(size):
    rng = np.random.default_rng(size)
    gradients = [rng.normal(size=1000).astype(np.float32) for _ in range(size)]
    picks = [TopKSelector(0.01).select(0, g) for g in gradients]

    def work(rank, transport):
        return sparse_allgather_sum(transport, *picks[rank], 1000, "t")

    results, transports = on_ranks(size, work)
    expected = np.zeros(1000, np.float32)
    for indices, values in picks:
        expected[indices] += values
    for result in results:
        assert result.tobytes() == results[0].tobytes()
    np.testing.assert_allclose(results[0], expected, rtol=1e-6)
    # 10 (int32 index, float32 value) pairs to each of the N-1 peers.
    assert all(t.bytes_sent == (size - 1) * 10 * 8 for t in transports)


# --- PowerSGD --------------------------------------------------------------------------------


def test_orthogonalize_gives_orthonormal_columns_of_the_same_span():
    rng = np.random.default_rng(3)
    matrix = rng.normal(size=(20, 3))
    q = orthogonalize(matrix)
    np.testing.assert_allclose(q.T @ q, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(q @ (q.T @ matrix), matrix, atol=1e-12)
    zero = orthogonalize(np.zeros((5, 2)))
    assert np.all(zero == 0)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_power_sgd_is_exact_when_the_sum_has_rank_r(size):
    rng = np.random.default_rng(size)
    left, right = rng.normal(size=(30, 2)), rng.normal(size=(2, 20))
    # Every replica's matrix lies in the same rank-2 space, so their sum has rank 2.
    matrices = [left @ (rng.normal(size=(2, 2)) @ right) for _ in range(size)]

    def work(rank, transport):
        factors = PowerSgdFactors(rank=2, seed=7)
        matrix = matrices[rank].copy()
        factors.allreduce(
            [("w", matrix)],
            lambda array, key: allreduce(transport, array, key),
            "s0",
            1.0 / size,
        )
        return matrix, factors.states["w"]

    results, transports = on_ranks(size, work)
    total = np.sum(matrices, axis=0)
    for approximation, state in results:
        np.testing.assert_allclose(approximation, total, atol=1e-9 * np.abs(total).max())
        assert approximation.tobytes() == results[0][0].tobytes()
        assert state.q.shape == (20, 2)
    # Each replica keeps what its share did not carry: the residuals add up to nothing here.
    np.testing.assert_allclose(
        sum(state.residual for _, state in results), 0, atol=1e-9 * np.abs(total).max()
    )
    if size > 1:  # only P (30x2) and Q (20x2) travelled, never the 30x20 matrix
        ring = sum(dense_allreduce_bytes("ring", (), n, 8, 0, size) for n in (60, 40))
        assert transports[0].bytes_sent == ring


def test_power_sgd_warm_start_converges_on_a_full_rank_matrix_with_error_feedback():
    # A fixed gradient every step: error feedback makes the running sum of approximations
    # catch up with the running sum of gradients (the residual stays bounded).
    rng = np.random.default_rng(4)
    gradient = rng.normal(size=(16, 12))
    factors = PowerSgdFactors(rank=1, seed=0)
    sent = np.zeros_like(gradient)
    for step in range(1, 41):
        matrix = gradient.copy()
        factors.allreduce([("w", matrix)], lambda array, key: array, f"s{step}", 1.0)
        sent += matrix
        np.testing.assert_allclose(sent + factors.states["w"].residual, step * gradient)
    assert np.abs(sent / 40 - gradient).max() < 0.2 * np.abs(gradient).max()


# --- the push API (parameter servers, central storage) ---------------------------------------


@pytest.mark.parametrize("compression", ["none", "fp16", "bf16", "topk:0.1", "powersgd:2"])
def test_push_payloads_round_trip_over_a_transport_and_pickle(compression):
    rng = np.random.default_rng(5)
    gradients = {"kernel": rng.normal(size=(40, 30)), "bias": rng.normal(size=30)}
    encoder = PushEncoder(compression, seed=0)
    payloads = {name: encoder.encode(name, g.astype(np.float32)) for name, g in gradients.items()}
    sender, receiver = ThreadTransport.group(2)
    for name, payload in payloads.items():
        send_payload(sender, 1, name, payload)
        received = receive_payload(receiver, 0, name, payload)
        assert sender.bytes_sent == receiver.bytes_received
        for got, sent in zip(received.arrays, payload.arrays):
            np.testing.assert_array_equal(got, sent)
        again = pickle.loads(pickle.dumps(payload))
        dense_gradient = decode(again)
        assert dense_gradient.shape == gradients[name].shape
        assert dense_gradient.dtype == np.float32
    assert decode(payloads["bias"]).shape == (30,)
    kernel_bytes = payloads["kernel"].nbytes
    expected = {
        "none": 40 * 30 * 4,
        "fp16": 40 * 30 * 2,
        "bf16": 40 * 30 * 2,
        "topk:0.1": 120 * 8,
        "powersgd:2": (40 + 30) * 2 * 4,
    }
    assert kernel_bytes == expected[compression]


def test_push_fp16_carries_the_loss_scale_and_decodes_without_it():
    encoder = PushEncoder("fp16")
    gradient = np.array([1e-6, 0.3, -2e-7], np.float32)
    scaled = encoder.encode("g", gradient, scale=2.0**16)
    assert scaled.scale == 2.0**16 and scaled.arrays[0].dtype == np.float16
    np.testing.assert_allclose(decode(scaled), gradient, rtol=1e-3)
    # Unscaled, float16 flushes 1e-7-sized values to subnormals with 2 significant bits.
    assert abs(decode(encoder.encode("g", gradient))[2] - gradient[2]) > 1e-3 * 2e-7
    assert not np.isfinite(decode(encoder.encode("g", np.array([1e5], np.float32)))).all()


def test_push_top_k_error_feedback_loses_nothing():
    encoder = PushEncoder("topk:0.1")
    rng = np.random.default_rng(6)
    gradients = [rng.integers(-50, 50, size=(6, 5)).astype(np.float64) for _ in range(12)]
    sent = sum(decode(encoder.encode("w", g)) for g in gradients)
    residual = encoder.top_k.residuals["w"].reshape(6, 5)
    np.testing.assert_array_equal(sent + residual, np.sum(gradients, axis=0))


def test_push_power_sgd_is_exact_for_a_rank_r_matrix_and_keeps_the_rest():
    rng = np.random.default_rng(7)
    low_rank = rng.normal(size=(24, 2)) @ rng.normal(size=(2, 18))
    encoder = PushEncoder("powersgd:2", seed=3)
    payload = encoder.encode("w", low_rank)
    p, _ = payload.arrays
    np.testing.assert_allclose(p.T @ p, np.eye(2), atol=1e-12)
    np.testing.assert_allclose(decode(payload), low_rank, atol=1e-10)
    full = rng.normal(size=(24, 18))
    approximation = decode(encoder.encode("v", full))
    residual = encoder.power_sgd.states["v"].residual
    np.testing.assert_allclose(approximation + residual, full, atol=1e-12)
    # A conv kernel is compressed as filters x the rest; a bias goes dense.
    kernel = encoder.encode("k", rng.normal(size=(8, 3, 3, 3)))
    assert [a.shape for a in kernel.arrays] == [(8, 2), (27, 2)]
    assert encoder.encode("b", np.ones(8)).method == "none"


# --- byte accounting -------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("size", [2, 3, 4, 5])
@pytest.mark.parametrize("length", [1, 3, 7, 1001])
def test_dense_byte_counts_are_what_the_collectives_send(algorithm, size, length):
    groups = [list(range((size + 1) // 2)), list(range((size + 1) // 2, size))]

    def work(rank, transport):
        return allreduce(transport, np.ones(length, np.float32), "t", algorithm, groups)

    _, transports = on_ranks(size, work)
    for rank, transport in enumerate(transports):
        counted = dense_allreduce_bytes(algorithm, groups, length, 4, rank, size)
        assert counted == transport.bytes_sent, rank


@pytest.mark.parametrize("compression", ["topk:0.01", "powersgd:2"])
def test_bucket_codecs_give_every_rank_the_same_bytes(compression):
    shapes = {"kernel": (64, 32), "bias": (32,), "head": (32, 10), "head_bias": (10,)}
    buckets = plan_buckets(shapes, 4, bucket_bytes=4096)
    rng = np.random.default_rng(8)
    inputs = [[rng.normal(size=b.size).astype(np.float32) for b in buckets] for _ in range(3)]

    def work(rank, transport):
        codec = bucket_codec(
            parse_compression(compression), transport, dense("ring"), buckets, 1 / 3, 0
        )
        return [
            codec.reduce(inputs[rank][index].copy(), f"b{index}", index)
            for index in range(len(buckets))
        ]

    results, transports = on_ranks(3, work)
    for per_rank in results:
        assert [r.tobytes() for r in per_rank] == [r.tobytes() for r in results[0]]
    full = sum(
        dense_allreduce_bytes("ring", (), b.size, 4, rank, 3) for b in buckets for rank in range(3)
    )
    assert sum(t.bytes_sent for t in transports) * 4 < full
