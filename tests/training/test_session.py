"""A training session learns, evaluates in chunks and exposes its variables by name."""

import numpy as np

from workbench.models import build_model
from workbench.optim import make_optimizer
from workbench.training import TrainingSession, build_training_graph


def test_loss_falls_on_a_learnable_problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 10))
    y = (x[:, 0] > 0).astype(np.int64)
    session = TrainingSession(
        build_model("mlp", (10,), 2, (16,)), make_optimizer("momentum"), 64, "float64", seed=0
    )
    losses = [float(session.step(x, y, 0.1, step)) for step in range(60)]
    assert losses[-1] < 0.25 * losses[0]
    _, accuracy = session.evaluate(x, y)
    assert accuracy > 0.95


def test_chunked_evaluation_equals_one_pass():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(25, 6)), rng.integers(0, 3, 25)
    session = TrainingSession(
        build_model("mlp", (6,), 3, (8,)), make_optimizer("sgd"), 5, "float64", seed=0
    )
    whole = session.evaluate(x, y, chunk=25)
    pieces = session.evaluate(x, y, chunk=7)
    np.testing.assert_allclose(whole, pieces, rtol=1e-12)


def test_training_graph_prunes_the_input_gradient_and_updates_after_all_reads():
    model = build_model("mlp", (6,), 3, (8,))
    training = build_training_graph(model, make_optimizer("sgd"), 4, "float64")
    graph = training.graph
    updates = graph.nodes_with_op("apply_sgd")
    assert len(updates) == 4
    # Nothing computes d loss / d inputs: it is not needed and prune removed it.
    readers_of_inputs = [n for n in graph.nodes if any(v.node == "inputs" for v in n.inputs)]
    assert [n.op for n in readers_of_inputs] == ["matmul", "transpose"]
    position = {node.name: i for i, node in enumerate(graph.nodes)}
    last_read = max(position[n.name] for n in graph.nodes if n.op not in ("apply_sgd",))
    assert all(position[u.name] > position[c] for u in updates for c in u.control_inputs)
    assert min(position[u.name] for u in updates) > last_read - len(updates)


def test_gradient_graph_form_exposes_named_gradients():
    model = build_model("mlp", (6,), 3, (8,))
    training = build_training_graph(model, None, 4, "float64")
    assert set(training.graph.outputs) == {"loss"} | {f"grad/{n}" for n in training.parameter_names}
