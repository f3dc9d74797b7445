"""Sliding windows over NCHW images as strided views: the vectorised core of conv and pooling.

``windows`` returns a (N, C, OH, OW, KH, KW) view without copying; ``scatter_windows`` adds
per-window values back into an image, looping over the KH*KW kernel offsets only (never over
pixels), which is how col2im is vectorised.
"""

from __future__ import annotations


def output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def pad_image(xp, x, padding: int):
    if padding == 0:
        return x
    return xp.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))


def windows(xp, x, kernel_h: int, kernel_w: int, stride: int):
    n, c, h, w = x.shape
    out_h = (h - kernel_h) // stride + 1
    out_w = (w - kernel_w) // stride + 1
    sn, sc, sh, sw = x.strides
    return xp.lib.stride_tricks.as_strided(
        x,
        shape=(n, c, out_h, out_w, kernel_h, kernel_w),
        strides=(sn, sc, sh * stride, sw * stride, sh, sw),
    )


def scatter_windows(xp, values, image_shape, stride: int):
    """Sum ``values`` (N, C, OH, OW, KH, KW) into a zero image of ``image_shape`` (padded)."""
    _, _, out_h, out_w, kernel_h, kernel_w = values.shape
    image = xp.zeros(image_shape, dtype=values.dtype)
    for i in range(kernel_h):
        for j in range(kernel_w):
            image[:, :, i : i + stride * out_h : stride, j : j + stride * out_w : stride] += values[
                ..., i, j
            ]
    return image


def crop(x, padding: int):
    if padding == 0:
        return x
    return x[:, :, padding:-padding, padding:-padding]
