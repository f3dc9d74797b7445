"""Tensor parallelism's device side: which parameters a model splits how (``plan``), and the
union of the ranks' training graphs that the ``tensor-parallel`` strategy places and
partitions (``graph``); the split itself is the graph pass
:mod:`workbench.passes.tensor_split`.
"""
