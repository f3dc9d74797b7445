"""Which parameters of a model split how over ``tp`` tensor-parallel ranks (Megatron-LM's
layout, docs/guide/distributed-training.md, "Tensor parallelism"):

- consecutive ``Dense`` layers pair up from the first (only ``Activation`` layers between
  them): the first of a pair is split by columns (its kernel's axis 1 and its bias), the
  second by rows (its kernel's axis 0; its bias is added to the whole sum), so a pair costs
  one all-reduce forward and one backward; an unpaired ``Dense`` is replicated;
- a ``TransformerBlock``'s attention query, key and value by columns, so a rank holds whole
  heads, its output projection by rows; its MLP's first kernel and bias by columns, the
  second kernel by rows; its norms and last bias replicated;
- an ``Embedding`` table by vocabulary (rows);
- everything else (convolutions, norms, position embeddings) replicated: every rank computes
  it whole, as Megatron does.
"""

from __future__ import annotations

from workbench.config import ConfigError
from workbench.models import Sequential
from workbench.models.layers import Activation, Dense, Embedding
from workbench.models.transformer import TransformerBlock
from workbench.passes.tensor_split import REPLICATED, ParameterSplit, SplitPlan

COLUMN_KERNEL = ParameterSplit("column", 1)
COLUMN_BIAS = ParameterSplit("column", 0)
ROW_KERNEL = ParameterSplit("row", 0)
VOCABULARY = ParameterSplit("vocabulary", 0)


def tensor_plan(
    model: Sequential, tp: int, layers: range | None = None, flag: str = "--tp"
) -> SplitPlan:
    """How each parameter of ``layers`` (all by default) splits over ``tp`` ranks (see the
    module docstring). Raises a :class:`ConfigError` naming ``flag`` when ``tp`` does not
    divide a split layer's width, heads or vocabulary, or when no layer splits.

    Examples
    --------
    >>> from workbench.models import mlp
    >>> plan = tensor_plan(mlp((8,), 3, (16, 8)), 2)
    >>> [(name, split.role) for name, split in plan.items() if split.axis is not None]
    [('dense_0/kernel', 'column'), ('dense_0/bias', 'column'), ('dense_1/kernel', 'row')]
    """
    if tp < 1:
        raise ConfigError(flag, f"the tensor-parallel degree must be at least 1, got {tp}")
    chosen = range(len(model.layers)) if layers is None else layers
    plan: dict[str, ParameterSplit] = {name: REPLICATED for name in model.parameter_names(chosen)}
    waiting: Dense | None = None  # the column half of a pair, until its row half comes
    for index in chosen:
        layer = model.layers[index]
        if isinstance(layer, Dense):
            if waiting is None:
                waiting = layer
            else:
                _divides(flag, tp, waiting.units, f"{waiting.name}'s {waiting.units} units")
                plan[f"{waiting.name}/kernel"] = COLUMN_KERNEL
                plan[f"{waiting.name}/bias"] = COLUMN_BIAS
                plan[f"{layer.name}/kernel"] = ROW_KERNEL
                waiting = None
            continue
        if not isinstance(layer, Activation):
            waiting = None
        if isinstance(layer, TransformerBlock):
            plan.update(_block_plan(model, index, layer, tp, flag))
        elif isinstance(layer, Embedding):
            _divides(flag, tp, layer.vocabulary, f"{layer.name}'s vocabulary of {layer.vocabulary}")
            plan[f"{layer.name}/embeddings"] = VOCABULARY
    if tp > 1 and all(split.axis is None for split in plan.values()):
        names = ", ".join(model.layers[i].name for i in chosen)
        raise ConfigError(
            flag,
            f"no layer of {names} splits over tensor-parallel ranks: tensor parallelism "
            "splits pairs of consecutive Dense layers, transformer blocks and embeddings",
        )
    return plan


def _block_plan(
    model: Sequential, index: int, block: TransformerBlock, tp: int, flag: str
) -> dict[str, ParameterSplit]:
    width = model.shapes[index][-1]
    _divides(flag, tp, block.heads, f"{block.name}'s {block.heads} attention heads")
    hidden = width * block.mlp_ratio
    _divides(flag, tp, hidden, f"{block.name}'s MLP width {hidden}")
    prefix = block.name
    plan = {f"{prefix}/attention/{name}": COLUMN_KERNEL for name in ("query", "key", "value")}
    plan[f"{prefix}/attention/output"] = ROW_KERNEL
    plan[f"{prefix}/mlp/kernel1"] = COLUMN_KERNEL
    plan[f"{prefix}/mlp/bias1"] = COLUMN_BIAS
    plan[f"{prefix}/mlp/kernel2"] = ROW_KERNEL
    return plan


def _divides(flag: str, tp: int, size: int, what: str) -> None:
    if size % tp:
        raise ConfigError(
            flag, f"{tp} tensor-parallel ranks do not divide {what}: choose a divisor of {size}"
        )
