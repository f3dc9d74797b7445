"""Every op has every rule, and every differentiable op is checked by finite differences."""

from tests.ir.op_zoo import CASES
from workbench.ir.rules import (
    FOLD_RULES,
    IMPL_RULES,
    NOT_DIFFERENTIABLE,
    OPS,
    SHAPE_RULES,
    VJP_RULES,
)

SOURCES = {"placeholder", "constant", "variable"}


def test_every_op_has_every_rule():
    for table_name, table in [
        ("impl", IMPL_RULES),
        ("shape", SHAPE_RULES),
        ("vjp", VJP_RULES),
        ("fold", FOLD_RULES),
    ]:
        missing = sorted(set(OPS) - set(table))
        assert not missing, f"ops without a {table_name} rule: {missing}"
        assert all(table[op] is not None for op in OPS), f"a {table_name} rule is None"


def test_every_differentiable_op_has_a_finite_difference_case():
    differentiable = {op for op in OPS if VJP_RULES[op] is not NOT_DIFFERENTIABLE} - SOURCES
    covered = {case.op for case in CASES}
    assert not differentiable - covered, f"untested vjp rules: {sorted(differentiable - covered)}"


def test_non_differentiable_ops_are_the_expected_ones():
    marked = {op for op in OPS if VJP_RULES[op] is NOT_DIFFERENTIABLE}
    assert marked == {
        "greater",
        "greater_equal",
        "equal",
        "argmax",
        "one_hot",
        "assign",
        "apply_sgd",
        "apply_momentum",
        "apply_adam",
        "send",
        "recv",
        "all_reduce",
    }
