"""``--recompute`` against the model: every layer it names must be one of the model's
(docs/guide/command-line.md, "Activation recomputation"). Checked where the model is known,
before anything starts."""

from __future__ import annotations

from workbench.config import ConfigError, RunConfig
from workbench.models import Sequential
from workbench.passes import RecomputeError, recompute_layers


def check_recompute(config: RunConfig, model: Sequential) -> None:
    """Raise :class:`~workbench.config.ConfigError` naming ``--recompute``, the name that is
    not a layer of ``model`` and the layers it has.

    Examples
    --------
    >>> from workbench.models import mlp
    >>> try:
    ...     check_recompute(RunConfig(recompute="dense_0,relu_0"), mlp((4,), 3, (8,)))
    ... except ConfigError as error:
    ...     print(error)
    --recompute: no layer 'relu_0' in the model; its layers: dense_0, dense_1 (or none, full)
    """
    try:
        recompute_layers(config.recompute, [layer.name for layer in model.layers])
    except RecomputeError as error:
        raise ConfigError("--recompute", str(error)) from None
    in_graph = config.options.get("replication") == "in-graph"
    if config.recompute != "none" and in_graph and config.strategy != "mirrored":
        # Their one client graph holds the parameter-server placement, which the pass does not
        # rewrite; mirrored's in-graph towers and every between-graph replica it does.
        raise ConfigError(
            "--recompute",
            f"{config.strategy} with --replication in-graph keeps every activation; "
            "use --replication between-graph (or mirrored) to recompute",
        )
