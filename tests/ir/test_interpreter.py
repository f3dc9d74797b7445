"""The reference interpreter runs graphs, updates variables in place and names failing nodes."""

import numpy as np
import pytest

from workbench.ir import Executable, ExecutionError, GraphBuilder, evaluate, ops


def test_forward_matches_numpy():
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.placeholder("x", (4, 3), "float64")
    w = b.variable("w", (3, 2), "float64")
    y = ops.tanh(x @ w) + 1.0
    x_value, w_value = rng.normal(size=(4, 3)), rng.normal(size=(3, 2))
    result = evaluate(b.build({"y": y}), {"x": x_value}, {"w": w_value})
    np.testing.assert_array_equal(result["y"], np.tanh(x_value @ w_value) + 1.0)


def test_multi_output_split_and_fetch_by_name():
    b = GraphBuilder()
    x = b.placeholder("x", (5,), "float64")
    first, second = ops.split(x, (2, 3))
    out = evaluate(b.build({"a": first, "b": second}), {"x": np.arange(5.0)})
    np.testing.assert_array_equal(out["a"], [0.0, 1.0])
    np.testing.assert_array_equal(out["b"], [2.0, 3.0, 4.0])


def test_update_ops_write_the_variable_store_in_place():
    b = GraphBuilder()
    w = b.variable("w", (2,), "float64")
    g = b.placeholder("g", (2,), "float64")
    lr = b.placeholder("lr", (), "float64")
    ops.apply_sgd(w, g, lr, var="w")
    store = {"w": np.array([1.0, 2.0])}
    buffer = store["w"]
    Executable(b.build({})).run({"g": np.array([1.0, -1.0]), "lr": np.array(0.5)}, store)
    np.testing.assert_array_equal(store["w"], [0.5, 2.5])
    assert store["w"] is buffer  # the device-resident buffer is reused, not replaced


def test_missing_feed_is_named():
    b = GraphBuilder()
    x = b.placeholder("images", (2,), "float64")
    with pytest.raises(ExecutionError, match="images"):
        evaluate(b.build({"y": ops.exp(x)}), {})


def test_failing_node_is_named():
    b = GraphBuilder()
    w = b.variable("w", (2,), "float64")
    g = b.placeholder("g", (2,), "float64")
    ops.apply_momentum(w, g, b.constant(0.1), var="w", momentum=0.9)
    with pytest.raises(ExecutionError, match=r"apply_momentum.*w/momentum"):
        evaluate(b.build({}), {"g": np.ones(2)}, {"w": np.ones(2)})


def test_adam_matches_the_paper_with_bias_correction_folded_into_the_step():
    # Kingma & Ba section 2's efficient form (as TF's ApplyAdam computes it).
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    w = b.variable("w", (3,), "float64")
    g = b.placeholder("g", (3,), "float64")
    ops.apply_adam(w, g, b.constant(0.01), var="w", beta1=0.9, beta2=0.999, epsilon=1e-8)
    program = Executable(b.build({}))
    store = {
        "w": np.zeros(3),
        "w/adam_m": np.zeros(3),
        "w/adam_v": np.zeros(3),
        "w/adam_t": np.zeros((), dtype=np.int64),
    }
    w_ref, m, v = np.zeros(3), np.zeros(3), np.zeros(3)
    for t in range(1, 4):
        grad = rng.normal(size=3)
        program.run({"g": grad}, store)
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        step_size = 0.01 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        w_ref -= step_size * m / (np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(store["w"], w_ref, rtol=1e-12)


def test_conv_and_pool_match_a_direct_loop():
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=(2, 3, 6, 6)), rng.normal(size=(4, 3, 3, 3))
    b = GraphBuilder()
    xt, wt = b.placeholder("x", x.shape, "float64"), b.placeholder("w", w.shape, "float64")
    out = evaluate(
        b.build({"conv": ops.conv2d(xt, wt, stride=1, padding=1), "pool": ops.max_pool2d(xt, 2)}),
        {"x": x, "w": w},
    )
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros((2, 4, 6, 6))
    for i in range(6):
        for j in range(6):
            expected[:, :, i, j] = np.einsum("nchw,ochw->no", padded[:, :, i : i + 3, j : j + 3], w)
    np.testing.assert_allclose(out["conv"], expected, rtol=1e-12)
    np.testing.assert_array_equal(out["pool"], x.reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5)))


def test_dropout_is_seeded_and_scaled():
    b = GraphBuilder()
    x = b.placeholder("x", (1000,), "float64")
    seed = b.placeholder("seed", (), "int64")
    graph = b.build({"y": ops.dropout(x, seed, 0.25)})
    first = evaluate(graph, {"x": np.ones(1000), "seed": np.int64(3)})["y"]
    again = evaluate(graph, {"x": np.ones(1000), "seed": np.int64(3)})["y"]
    other = evaluate(graph, {"x": np.ones(1000), "seed": np.int64(4)})["y"]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert set(np.unique(first)) == {0.0, 1.0 / 0.75}
    assert 0.2 < np.mean(first == 0) < 0.3


def test_on_fetch_sees_each_fetched_value_as_soon_as_it_exists():
    b = GraphBuilder()
    x = b.placeholder("x", (2,), "float64")
    first = ops.exp(x)
    second = ops.tanh(first) * 2.0
    seen = []
    program = Executable(b.build({"first": first, "second": second}))

    def record(name, value):
        seen.append((name, value.copy(), "second" in [s[0] for s in seen]))

    out = program.run({"x": np.zeros(2)}, on_fetch=record)
    assert [name for name, _, _ in seen] == ["first", "second"]
    np.testing.assert_array_equal(seen[0][1], out["first"])
