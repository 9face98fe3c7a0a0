"""LZ4 frames: pages (default 4 KiB) compressed independently, in the standard LZ4 frame format
that the ``lz4`` command-line tool and the ``lz4`` Python package read."""

from . import _check, _native

__all__ = ["compress", "decompress"]


def compress(data, page_kib=4, device="auto"):
    """Compresses any bytes-like ``data`` (bytes, bytearray, memoryview, numpy uint8) into one
    LZ4 frame. ``page_kib``: page size, 1..64 KiB. Returns bytes."""
    if isinstance(page_kib, bool) or not isinstance(page_kib, int):
        raise TypeError(f"page_kib must be an int, got {type(page_kib).__name__}")
    if page_kib < 1:
        raise ValueError(f"page_kib must be 1..64, got {page_kib}")
    return _native.lz4_compress(_check.byteslike("data", data), page_kib, _check.device(device))


def decompress(frame, device="auto"):
    """Decodes every LZ4 frame in the bytes-like ``frame`` and returns the content as bytes.
    Corrupt or truncated input raises ValueError."""
    return _native.lz4_decompress(_check.byteslike("frame", frame), _check.device(device))
