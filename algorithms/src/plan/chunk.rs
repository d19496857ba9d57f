//! Buffers and chunk references.

use serde::{Deserialize, Serialize};

/// Which of a rank's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BufferKind {
    /// The user's send buffer (read-only out of place).
    Input,
    /// The user's receive buffer.
    Output,
    /// Library-owned scratch, registered with every channel.
    Scratch,
}

/// Size and chunking of a buffer: `factor * count` elements in `chunks` balanced chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferSpec {
    /// Size in multiples of the message count.
    pub factor: u32,
    /// Number of chunks the buffer is cut into (≥ 1).
    pub chunks: u32,
}

impl BufferSpec {
    /// Elements for `count`.
    pub fn elems(&self, count: u64) -> u64 {
        self.factor as u64 * count
    }
}

/// Chunks `[index, index + count)` of a buffer; in a `Loop`, iteration `i` refers to
/// chunks starting at `index + i * step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChunkRef {
    /// Buffer.
    pub buf: BufferKind,
    /// First chunk.
    pub index: u32,
    /// Number of consecutive chunks (≥ 1).
    #[serde(default = "one")]
    pub count: u32,
    /// Added to `index` per loop iteration.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step: u32,
}

fn one() -> u32 {
    1
}
fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl ChunkRef {
    /// One chunk.
    pub const fn new(buf: BufferKind, index: u32) -> ChunkRef {
        ChunkRef {
            buf,
            index,
            count: 1,
            step: 0,
        }
    }

    /// `count` consecutive chunks.
    pub const fn span(buf: BufferKind, index: u32, count: u32) -> ChunkRef {
        ChunkRef {
            buf,
            index,
            count,
            step: 0,
        }
    }

    /// The same reference advancing by `step` chunks per loop iteration.
    pub const fn stepping(self, step: u32) -> ChunkRef {
        ChunkRef { step, ..self }
    }

    /// First chunk index at loop iteration `it`.
    pub fn first_at(&self, it: u32) -> u64 {
        self.index as u64 + it as u64 * self.step as u64
    }

    /// Element range `[start, end)` in a buffer with `spec` for message `count`.
    pub fn range(&self, spec: BufferSpec, it: u32, count: u64) -> (u64, u64) {
        let total = spec.elems(count) as u128;
        let n = spec.chunks.max(1) as u128;
        let first = self.first_at(it) as u128;
        let start = first * total / n;
        let end = (first + self.count as u128) * total / n;
        (start as u64, end as u64)
    }
}
