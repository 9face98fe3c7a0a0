"""ptxflow.lz4 frames against the lz4 package, both ways."""
import os

import numpy as np
import pytest

import ptxflow

lz4frame = pytest.importorskip("lz4.frame")


def corpus(n=300_000, seed=0):
    rng = np.random.default_rng(seed)
    words = [b"ptxflow ", b"lz4 ", b"page ", b"frame ", b"block ", b"\x00\x01\x02", b"gpu "]
    text = b"".join(words[i] for i in rng.integers(0, len(words), n // 5))
    return text[: n // 2] + os.urandom(n // 4) + text[n // 2:]


@pytest.mark.parametrize("page_kib", [1, 4, 64])
def test_our_frames_decode_with_lz4_package(page_kib):
    data = corpus()
    frame = ptxflow.lz4.compress(data, page_kib=page_kib, device="cpu")
    assert isinstance(frame, bytes) and len(frame) < len(data)
    assert lz4frame.decompress(frame) == data
    assert ptxflow.lz4.decompress(frame, device="cpu") == data


@pytest.mark.parametrize("block_size", [lz4frame.BLOCKSIZE_MAX64KB, lz4frame.BLOCKSIZE_MAX4MB])
@pytest.mark.parametrize("linked", [False, True])
def test_lz4_package_frames_decode_with_ours(block_size, linked):
    data = corpus(seed=1)
    frame = lz4frame.compress(data, block_size=block_size, block_linked=linked,
                              content_checksum=True)
    assert ptxflow.lz4.decompress(frame, device="cpu") == data


def test_any_bytes_like_input():
    data = corpus(50_000)
    want = ptxflow.lz4.compress(data, device="cpu")
    for obj in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8),
                np.frombuffer(data, np.uint8).reshape(-1, 10) if len(data) % 10 == 0 else memoryview(data)):
        assert ptxflow.lz4.compress(obj, device="cpu") == want
    assert ptxflow.lz4.decompress(bytearray(want)) == data
    assert ptxflow.lz4.decompress(memoryview(want)) == data
    assert ptxflow.lz4.decompress(np.frombuffer(want, np.uint8)) == data


def test_empty_and_tiny_inputs():
    for data in (b"", b"a", b"abc" * 3):
        frame = ptxflow.lz4.compress(data, device="cpu")
        assert lz4frame.decompress(frame) == data
        assert ptxflow.lz4.decompress(frame) == data


def test_bad_inputs():
    with pytest.raises(TypeError, match="bytes-like"):
        ptxflow.lz4.compress(12345)
    with pytest.raises(TypeError, match="str"):
        ptxflow.lz4.compress("text")
    with pytest.raises(TypeError, match="uint8"):
        ptxflow.lz4.compress(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        ptxflow.lz4.compress(memoryview(b"abcdef")[::2])
    with pytest.raises(ValueError):
        ptxflow.lz4.compress(b"abc", page_kib=65)
    with pytest.raises(ValueError):
        ptxflow.lz4.compress(b"abc", page_kib=0)
    frame = ptxflow.lz4.compress(corpus(20_000), device="cpu")
    with pytest.raises(ValueError):
        ptxflow.lz4.decompress(frame[:-7])
    broken = bytearray(frame)
    broken[40] ^= 0xFF
    with pytest.raises(ValueError):
        ptxflow.lz4.decompress(b"not an lz4 frame at all")
    with pytest.raises(ValueError, match="device"):
        ptxflow.lz4.decompress(frame, device="fpga")
