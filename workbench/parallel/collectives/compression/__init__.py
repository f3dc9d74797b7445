"""Gradient compression (``--compression none | fp16 | bf16 | topk:RATIO | powersgd:RANK``).

What flows in: a replica's gradients (a packed bucket for an all-reduce, or one tensor for a
push to a single receiver). What flows out: the sum over replicas, or the codec's
approximation of it, as dense arrays of the gradients' dtype, the same bytes on every replica.
One file per part:

- ``spec``: the flag's values, parsed and checked;
- ``half_precision``: fp16 and bf16 (as uint16, rounded to nearest even) on the wire;
- ``loss_scaling``: the dynamic loss scaler 16-bit gradients need (skip a step on overflow);
- ``top_k``: top-k sparsification with error feedback, all-gathered (index, value) pairs;
- ``power_sgd``: PowerSGD's rank-r power iteration with warm start and error feedback;
- ``bucket_codecs``: each method as a compressed all-reduce of a bucket (mirrored replicas);
- ``push_codecs``: each method as ``encode``/``decode`` of one push (central storage, and
  the API a parameter-server push can use);
- ``accounting``: uncompressed byte counts and the ``--json`` ``compression`` object, from
  events.

Invariants: sums happen in the gradients' own dtype; error feedback loses nothing (what was
sent plus the residual is the sum of the gradients); every replica of an all-reduce ends with
identical bytes.
"""

from workbench.parallel.collectives.compression.accounting import (
    compression_summary,
    dense_allreduce_bytes,
)
from workbench.parallel.collectives.compression.bucket_codecs import bucket_codec
from workbench.parallel.collectives.compression.half_precision import (
    HalfPrecisionWire,
    compressed_allreduce,
    from_bfloat16_bits,
    half_precision_allreduce,
    to_bfloat16_bits,
)
from workbench.parallel.collectives.compression.loss_scaling import DynamicLossScaler
from workbench.parallel.collectives.compression.push_codecs import (
    Payload,
    PushEncoder,
    decode,
    receive_payload,
    send_payload,
)
from workbench.parallel.collectives.compression.spec import (
    COMPRESSION_FORMS,
    CompressionError,
    CompressionSpec,
    canonical_compression,
    parse_compression,
)

__all__ = [
    "COMPRESSION_FORMS",
    "CompressionError",
    "CompressionSpec",
    "DynamicLossScaler",
    "HalfPrecisionWire",
    "Payload",
    "PushEncoder",
    "bucket_codec",
    "canonical_compression",
    "compressed_allreduce",
    "compression_summary",
    "decode",
    "dense_allreduce_bytes",
    "from_bfloat16_bits",
    "half_precision_allreduce",
    "parse_compression",
    "receive_payload",
    "send_payload",
    "to_bfloat16_bits",
]
