//! LZ4 page compression on the GPU: the `lz4_compress` / `lz4_decompress` kernels behind the
//! [`PageCodec`](super::PageCodec) and [`PageStream`](super::PageStream) seams.

pub mod layout;
