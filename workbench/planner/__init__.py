"""The what-if planner: each strategy's step, built as simulator programs from a cost model."""
