"""Every op's vjp rule agrees with central finite differences in float64."""

import numpy as np
import pytest

from tests.ir.op_zoo import CASES, fixed_feeds
from workbench.ir import Executable, GraphBuilder, gradients, ops


def _case_id(case):
    return case.id or case.op


def _draw(rng, shape, positive):
    values = rng.uniform(0.5, 2.0, shape) if positive else rng.normal(size=shape)
    # Keep values away from the kinks of relu/max/maximum so finite differences are valid.
    return np.where(np.abs(values) < 0.05, 0.3, values)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_vjp_matches_central_differences(case):
    rng = np.random.default_rng(0)
    builder = GraphBuilder()
    inputs = [builder.placeholder(f"in{i}", s, "float64") for i, s in enumerate(case.float_inputs)]
    output = case.build(builder, *inputs)
    weights = builder.placeholder("weights", output.shape, "float64")
    # A random projection makes every output element matter to the scalar being differentiated.
    loss = ops.reduce_sum(output * weights)
    grads = gradients(builder, loss, inputs)
    graph = builder.build({"loss": loss, **{f"grad{i}": g for i, g in enumerate(grads)}})
    program = Executable(graph)

    feeds = {**fixed_feeds(case), "weights": rng.normal(size=output.shape)}
    arrays = [_draw(rng, s, case.positive) for s in case.float_inputs]
    if case.op in ("max_pool2d", "max_pool2d_grad", "max_pool2d_select", "max", "maximum"):
        # Distinct values: the maximum of every window is unique, so the function is smooth.
        arrays = [rng.permutation(a.size).reshape(a.shape) * 0.1 + 0.01 * a for a in arrays]
    feeds.update({f"in{i}": a for i, a in enumerate(arrays)})
    analytic = program.run(feeds)

    for index, array in enumerate(arrays):
        numeric = np.zeros_like(array)
        for flat in range(array.size):
            bumped = array.copy().reshape(-1)
            bumped[flat] += case.step
            up = program.run({**feeds, f"in{index}": bumped.reshape(array.shape)})["loss"]
            bumped[flat] -= 2 * case.step
            down = program.run({**feeds, f"in{index}": bumped.reshape(array.shape)})["loss"]
            numeric.reshape(-1)[flat] = (up - down) / (2 * case.step)
        np.testing.assert_allclose(
            analytic[f"grad{index}"],
            numeric,
            rtol=case.rtol,
            atol=1e-7,
            err_msg=f"{_case_id(case)}: gradient of input {index}",
        )
