//! The caller's buffers on every rank: what a rank publishes about the buffers of one
//! call ([`Entry`], through [`crate::agree::CallTable`]) and how a peer's buffer is
//! mapped into this process ([`Imports`]).
//!
//! A rank describes each buffer the kernel will address as one of:
//! - [`Where::RegInput`] / [`Where::RegOutput`] + offset: the communicator's own
//!   registered regions, which every peer mapped at setup (the rank staged the call:
//!   copied the caller's data in, and will copy the result out);
//! - [`Where::Ipc`]: a `cuMemAlloc` allocation (what `cudaMalloc` and PyTorch's caching
//!   allocator return), by its legacy IPC handle, the process's nonce, the allocation's
//!   buffer id and base, and the offset of the pointer in it;
//! - [`Where::Vmm`]: cuMem VMM memory (PyTorch's expandable segments), by the key of
//!   the list of physical pieces that hold the buffer ([`commhal_cuda_rt::pieces`]);
//!   the list and one fd per piece travel over [`crate::piece_link`] the first time a
//!   peer needs them, and the peer maps the pieces back to back.
//!
//! **The import cache** is process-wide, keyed by (device, exporter nonce, buffer id):
//! a buffer id is never reused within the exporting process, so an address that the
//! exporter freed and got back from `cudaMalloc` arrives under a new id and is opened
//! anew. The old mapping of the same exporter that overlaps the new allocation is
//! closed then (the exporter freed it, so nothing can use it any more), unless a CUDA
//! graph captured it: a communicator keeps the mappings its captured launches use open
//! for as long as it lives ([`Imports::resolve`]'s `pin`). VMM pieces are keyed by
//! (device, exporter nonce, key of the piece list): a piece the owner unmapped and
//! replaced has a new block id, so the list gets a new key, and the old mappings
//! that hold a piece with another block id at the same owner address are closed
//! when the new list arrives.
//!
//! A mapping keeps the owner's physical memory alive until it is closed, as with
//! legacy IPC: memory a process frees and never reuses at the same address stays
//! allocated while a peer's communicator process keeps the mapping cached.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use std::os::fd::OwnedFd;

use commhal_cuda_rt::Context;
use commhal_cuda_rt::ipc::{self, IPC_HANDLE_LEN, IpcMapping, PointerInfo};
use commhal_cuda_rt::pieces::{Piece, PieceMapping, pieces_key};

use crate::error::{CollError, Result};

/// This process's nonce: tells peers' allocations apart from ours and from those of an
/// earlier process with the same pid.
pub fn process_nonce() -> u64 {
    static NONCE: OnceLock<u64> = OnceLock::new();
    *NONCE.get_or_init(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (u64::from(std::process::id()) << 40) ^ t ^ 0x9e37_79b9_7f4a_7c15
    })
}

/// Where a buffer of one call lives, as its owner describes it to the peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// The owner's registered input region (staged call).
    RegInput,
    /// The owner's registered output region (staged call).
    RegOutput,
    /// A `cuMemAlloc` allocation, opened through its legacy IPC handle.
    Ipc {
        /// Buffer id of the allocation (unique in the owner's process).
        id: u64,
        /// Its base address in the owner's process.
        base: u64,
        /// Its size in bytes.
        size: u64,
        /// Its legacy IPC handle.
        handle: [u8; IPC_HANDLE_LEN],
    },
    /// cuMem VMM memory: the physical pieces that hold the buffer, mapped back to
    /// back from `base`.
    Vmm {
        /// [`pieces_key`] of the piece list.
        key: u64,
        /// The first piece's address in the owner's process.
        base: u64,
        /// Bytes of all the pieces.
        size: u64,
        /// Bit mask of the ranks that receive the list and its fds over the piece
        /// links after this call's exchange (the owner has not sent it to them yet).
        to: u32,
    },
}

/// One buffer: where, and the byte offset of the kernel's address in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufDesc {
    /// The allocation.
    pub at: Where,
    /// Offset from its start.
    pub off: u64,
}

/// What every rank must pass identically for a call to be matched (the rest of the
/// entry differs per rank by nature).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// Collective (`Collective` index).
    pub coll: u8,
    /// Element type (bench `Dtype` index).
    pub dtype: u8,
    /// Reduction operator code (0 where none applies).
    pub op: u8,
    /// Its scalar's bits (pre-multiplied sum; 0 otherwise).
    pub scalar: u64,
    /// NCCL's in-place variant.
    pub in_place: bool,
    /// Root (0 where none applies).
    pub root: u32,
    /// Element count as the caller passed it.
    pub count: u64,
}

/// Bytes of an encoded [`Signature`].
pub const SIGNATURE_BYTES: usize = 24;

impl Signature {
    /// The fixed-size encoding (the call table's signature log and entries).
    pub fn to_bytes(&self) -> [u8; SIGNATURE_BYTES] {
        let mut b = [0u8; SIGNATURE_BYTES];
        b[..4].copy_from_slice(&[self.coll, self.dtype, self.op, u8::from(self.in_place)]);
        b[4..8].copy_from_slice(&self.root.to_le_bytes());
        b[8..16].copy_from_slice(&self.count.to_le_bytes());
        b[16..].copy_from_slice(&self.scalar.to_le_bytes());
        b
    }

    /// Inverse of [`Signature::to_bytes`].
    pub fn from_bytes(b: &[u8; SIGNATURE_BYTES]) -> Signature {
        let mut r = Reader(b);
        let [coll, dtype, op, in_place] = r.take::<4>().unwrap_or_default();
        Signature {
            coll,
            dtype,
            op,
            in_place: in_place != 0,
            root: r.u32().unwrap_or_default(),
            count: r.u64().unwrap_or_default(),
            scalar: r.u64().unwrap_or_default(),
        }
    }

    /// The first field in which `other` (rank `p`'s) differs from this rank's, as a
    /// message naming both values.
    pub fn mismatch(&self, other: &Signature, p: u32, me: u32) -> Option<String> {
        let fields: [(&str, u64, u64); 7] = [
            ("collective", self.coll.into(), other.coll.into()),
            ("datatype", self.dtype.into(), other.dtype.into()),
            ("reduction op", self.op.into(), other.op.into()),
            ("pre-multiply scalar (bits)", self.scalar, other.scalar),
            (
                "in-place",
                u64::from(self.in_place),
                u64::from(other.in_place),
            ),
            ("root", self.root.into(), other.root.into()),
            ("count", self.count, other.count),
        ];
        fields.iter().find(|(_, a, b)| a != b).map(|(name, a, b)| {
            format!(
                "rank {p} called this collective with {name} {b} while rank {me} passed {a}: every rank must pass the same collective, count, datatype, op, root and in-place choice, in the same order"
            )
        })
    }
}

impl BufDesc {
    /// The encoding used in call-table entries and point-to-point postings.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        put_buf(out, self)
    }

    /// Parse one [`BufDesc::encode_into`] from the front of `bytes`: the description
    /// and what follows it, or `None` when malformed.
    pub fn decode(bytes: &[u8]) -> Option<(BufDesc, &[u8])> {
        let mut r = Reader(bytes);
        let d = r.buf()?;
        Some((d, r.0))
    }

    /// The checks [`Imports::resolve`] makes on rank `p`'s description (its owner has
    /// `nonce`; this process `own`) before it maps anything: for a registered region
    /// (`reg_in` / `reg_out`: rank `p`'s, as mapped here) the address in this process;
    /// `None` for an allocation to open, whose offset lies inside it.
    pub fn check(
        &self,
        p: u32,
        nonce: u64,
        own: u64,
        (reg_in, reg_out): (u64, u64),
    ) -> Result<Option<u64>> {
        let (Where::Ipc { base, size, .. } | Where::Vmm { base, size, .. }) = self.at else {
            let reg = if self.at == Where::RegInput {
                reg_in
            } else {
                reg_out
            };
            return reg.checked_add(self.off).map(Some).ok_or_else(|| {
                CollError::invalid(format!(
                    "rank {p} published offset {:#x} in its registered region, past the end of the address space: every rank must run the same commhal build",
                    self.off
                ))
            });
        };
        if nonce == own {
            return Err(CollError::invalid(format!(
                "rank {p} runs in this process: the GPU communicator needs one process per rank"
            )));
        }
        if self.off >= size {
            return Err(CollError::invalid(format!(
                "rank {p} published offset {} beyond its {size}-byte allocation",
                self.off
            )));
        }
        // the import cache compares allocations as [base, base + size)
        if base.checked_add(size).is_none() {
            return Err(CollError::invalid(format!(
                "rank {p} published a {size}-byte allocation at {base:#x}, past the end of the address space: every rank must run the same commhal build"
            )));
        }
        Ok(None)
    }
}

/// One rank's entry of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// What must agree.
    pub sig: Signature,
    /// The owner's [`process_nonce`].
    pub nonce: u64,
    /// The buffer the kernel reads (`CollArgs::input`).
    pub input: BufDesc,
    /// The buffer the kernel writes (`CollArgs::output`).
    pub output: BufDesc,
}

const KIND_REG_IN: u8 = 1;
const KIND_REG_OUT: u8 = 2;
const KIND_IPC: u8 = 3;
const KIND_VMM: u8 = 4;
const ENTRY_MAGIC: u32 = 0x4348_4531; // "CHE1"
const BUF_BYTES: usize = 1 + 8 + 8 + 8 + 8 + IPC_HANDLE_LEN;
/// Bytes of an encoded entry.
pub const ENTRY_BYTES: usize = 4 + SIGNATURE_BYTES + 8 + 2 * BUF_BYTES;

fn put_buf(out: &mut Vec<u8>, b: &BufDesc) {
    let (kind, id, base, size, handle) = match b.at {
        Where::RegInput => (KIND_REG_IN, 0, 0, 0, [0u8; IPC_HANDLE_LEN]),
        Where::RegOutput => (KIND_REG_OUT, 0, 0, 0, [0u8; IPC_HANDLE_LEN]),
        Where::Ipc {
            id,
            base,
            size,
            handle,
        } => (KIND_IPC, id, base, size, handle),
        Where::Vmm {
            key,
            base,
            size,
            to,
        } => {
            let mut h = [0u8; IPC_HANDLE_LEN];
            h[..4].copy_from_slice(&to.to_le_bytes());
            (KIND_VMM, key, base, size, h)
        }
    };
    out.push(kind);
    for w in [id, base, size, b.off] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(&handle);
}

/// Reads little-endian fields off the front of a byte slice; `None` once it runs out.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn buf(&mut self) -> Option<BufDesc> {
        let kind = self.u8()?;
        let (id, base, size, off) = (self.u64()?, self.u64()?, self.u64()?, self.u64()?);
        let handle = self.take::<IPC_HANDLE_LEN>()?;
        let at = match kind {
            KIND_REG_IN => Where::RegInput,
            KIND_REG_OUT => Where::RegOutput,
            KIND_IPC => Where::Ipc {
                id,
                base,
                size,
                handle,
            },
            KIND_VMM => Where::Vmm {
                key: id,
                base,
                size,
                to: u32::from_le_bytes([handle[0], handle[1], handle[2], handle[3]]),
            },
            _ => return None,
        };
        Some(BufDesc { at, off })
    }
}

impl Entry {
    /// The bytes published in the call table.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(ENTRY_BYTES);
        v.extend_from_slice(&ENTRY_MAGIC.to_le_bytes());
        v.extend_from_slice(&self.sig.to_bytes());
        v.extend_from_slice(&self.nonce.to_le_bytes());
        put_buf(&mut v, &self.input);
        put_buf(&mut v, &self.output);
        v
    }

    /// Parse rank `p`'s entry; an error names the rank (a different commhal build, or
    /// a corrupted table).
    pub fn decode(bytes: &[u8], p: u32) -> Result<Entry> {
        let mut r = Reader(bytes);
        let parsed = (|| {
            if r.u32()? != ENTRY_MAGIC {
                return None;
            }
            let sig = Signature::from_bytes(&r.take::<SIGNATURE_BYTES>()?);
            let nonce = r.u64()?;
            Some(Entry {
                sig,
                nonce,
                input: r.buf()?,
                output: r.buf()?,
            })
        })();
        parsed.ok_or_else(|| {
            CollError::invalid(format!(
                "rank {p} published a malformed call-table entry ({} bytes): every rank must run the same commhal build",
                bytes.len()
            ))
        })
    }
}

/// The legacy IPC handle of this process's allocation `info` (made once per
/// allocation: buffer ids are never reused, so the cache cannot go stale).
pub fn export_handle(ctx: &Context, info: &PointerInfo) -> Result<[u8; IPC_HANDLE_LEN]> {
    static OWN: OnceLock<Mutex<HashMap<u64, [u8; IPC_HANDLE_LEN]>>> = OnceLock::new();
    let mut own = OWN
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| CollError::invalid("export cache lock poisoned"))?;
    if let Some(h) = own.get(&info.buffer_id) {
        return Ok(*h);
    }
    let h = ipc::ipc_handle(ctx, info.base)?;
    own.insert(info.buffer_id, h);
    Ok(h)
}

/// A peer's buffer opened in this process: an allocation through legacy IPC, or VMM
/// pieces mapped back to back. Closed on drop.
#[derive(Debug)]
pub enum PeerMapping {
    /// A `cuMemAlloc` allocation.
    Ipc(IpcMapping),
    /// cuMem VMM pieces.
    Pieces(PieceMapping),
}

impl PeerMapping {
    /// Where the allocation (the first piece) starts in this process.
    pub fn addr(&self) -> u64 {
        match self {
            PeerMapping::Ipc(m) => m.addr(),
            PeerMapping::Pieces(m) => m.addr(),
        }
    }
}

/// Key of an opened peer buffer: (device of this process, exporter nonce, VMM?, buffer
/// id or piece-list key).
type Key = (u32, u64, bool, u64);

/// One opened buffer: the owner's range, its pieces (VMM only), the mapping.
#[derive(Debug)]
struct Opened {
    base: u64,
    size: u64,
    pieces: Vec<Piece>,
    map: Arc<PeerMapping>,
}

/// The process-wide cache of opened peer allocations (see the module docs).
#[derive(Debug, Default)]
pub struct Imports {
    open: HashMap<Key, Opened>,
}

fn imports() -> &'static Mutex<Imports> {
    static CACHE: OnceLock<Mutex<Imports>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

fn lock_imports() -> Result<std::sync::MutexGuard<'static, Imports>> {
    imports()
        .lock()
        .map_err(|_| CollError::invalid("import cache lock poisoned"))
}

/// Whether a list of pieces shows that `old` was unmapped by its owner: a piece of
/// `new` overlaps one of `old` at the owner's addresses with another block id.
pub fn pieces_replaced(old: &[Piece], new: &[Piece]) -> bool {
    old.iter().any(|o| {
        new.iter().any(|n| {
            n.block_id != o.block_id && n.base < o.base + o.size && o.base < n.base + n.size
        })
    })
}

impl Imports {
    /// The address in this process of rank `p`'s buffer `d` (whose owner has `nonce`):
    /// its registered region (`reg_in` / `reg_out`, mapped at setup) or the opened
    /// allocation plus the offset. With `pin`, the mapping is also pushed there so it
    /// stays open while the caller lives (CUDA graph captures). VMM pieces must have
    /// arrived ([`Imports::insert_pieces`]) in this call or an earlier one.
    pub fn resolve(
        ctx: &Arc<Context>,
        p: u32,
        nonce: u64,
        d: &BufDesc,
        (reg_in, reg_out): (u64, u64),
        pin: Option<&Mutex<Vec<Arc<PeerMapping>>>>,
    ) -> Result<u64> {
        if let Some(addr) = d.check(p, nonce, process_nonce(), (reg_in, reg_out))? {
            return Ok(addr);
        }
        let mut cache = lock_imports()?;
        let key = match d.at {
            Where::Ipc {
                id,
                base,
                size,
                handle,
            } => {
                let key = (ctx.ordinal(), nonce, false, id);
                if !cache.open.contains_key(&key) {
                    // the exporter freed whatever of its allocations this one overlaps
                    cache.open.retain(|&(dev, n, vmm, old), o| {
                        !(dev == key.0
                            && n == nonce
                            && !vmm
                            && old != id
                            && o.base < base + size
                            && base < o.base + o.size)
                    });
                    let m = IpcMapping::open(ctx, &handle).map_err(|e| {
                        CollError::invalid(format!(
                            "mapping rank {p}'s buffer ({size} bytes at its {base:#x}): {e}"
                        ))
                    })?;
                    cache.open.insert(
                        key,
                        Opened {
                            base,
                            size,
                            pieces: Vec::new(),
                            map: Arc::new(PeerMapping::Ipc(m)),
                        },
                    );
                }
                key
            }
            Where::Vmm { key, base, .. } => {
                let k = (ctx.ordinal(), nonce, true, key);
                if !cache.open.contains_key(&k) {
                    return Err(CollError::invalid(format!(
                        "rank {p}'s VMM buffer at its {base:#x} was never received here (an earlier call on it failed on this rank): recreate the communicator"
                    )));
                }
                k
            }
            Where::RegInput | Where::RegOutput => {
                return Err(CollError::invalid(
                    "a registered buffer without its address (check should have given it)",
                ));
            }
        };
        let m = &cache.open[&key].map;
        if let Some(pins) = pin
            && let Ok(mut v) = pins.lock()
            && !v.iter().any(|x| Arc::ptr_eq(x, m))
        {
            v.push(m.clone());
        }
        Ok(m.addr() + d.off)
    }

    /// Map rank `p`'s VMM buffer `d` (a [`Where::Vmm`] of its entry; its owner has
    /// `nonce`) from the `pieces` and `fds` it sent, unless this process has it
    /// already; close the mappings of that owner whose pieces it replaced.
    pub fn insert_pieces(
        ctx: &Arc<Context>,
        p: u32,
        nonce: u64,
        d: &BufDesc,
        pieces: Vec<Piece>,
        fds: Vec<OwnedFd>,
    ) -> Result<()> {
        let Where::Vmm {
            key, base, size, ..
        } = d.at
        else {
            return Err(CollError::invalid(
                "pieces for a buffer that is not VMM memory",
            ));
        };
        let total = pieces.iter().try_fold(0u64, |t, x| t.checked_add(x.size));
        if pieces_key(&pieces) != key
            || pieces.first().map(|x| x.base) != Some(base)
            || total != Some(size)
            || fds.len() != pieces.len()
        {
            return Err(CollError::invalid(format!(
                "rank {p} sent VMM pieces that do not match its call-table entry: every rank must run the same commhal build"
            )));
        }
        let k = (ctx.ordinal(), nonce, true, key);
        let mut cache = lock_imports()?;
        if cache.open.contains_key(&k) {
            return Ok(());
        }
        cache.open.retain(|&(dev, n, vmm, _), o| {
            !(dev == k.0 && n == nonce && vmm && pieces_replaced(&o.pieces, &pieces))
        });
        let sized: Vec<(u64, OwnedFd)> = pieces.iter().map(|x| x.size).zip(fds).collect();
        let m = PieceMapping::import(ctx, &sized).map_err(|e| {
            CollError::invalid(format!(
                "mapping rank {p}'s VMM buffer ({size} bytes in {} pieces at its {base:#x}): {e}",
                pieces.len()
            ))
        })?;
        cache.open.insert(
            k,
            Opened {
                base,
                size,
                pieces,
                map: Arc::new(PeerMapping::Pieces(m)),
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Entry {
        Entry {
            sig: Signature {
                coll: 2,
                dtype: 1,
                op: 3,
                scalar: 0x3fe0_0000_0000_0000,
                in_place: true,
                root: 5,
                count: 123_456_789,
            },
            nonce: 0xdead_beef,
            input: BufDesc {
                at: Where::RegOutput,
                off: 64,
            },
            output: BufDesc {
                at: Where::Ipc {
                    id: 7,
                    base: 0x7f00_0000,
                    size: 1 << 20,
                    handle: [9; IPC_HANDLE_LEN],
                },
                off: 4096,
            },
        }
    }

    #[test]
    fn entries_round_trip_and_fit_a_slot() {
        let e = sample();
        let b = e.encode();
        assert_eq!(b.len(), ENTRY_BYTES);
        assert!(b.len() <= crate::agree::MAX_PAYLOAD);
        assert_eq!(Entry::decode(&b, 1).unwrap(), e);
    }

    #[test]
    fn vmm_descriptions_round_trip_and_are_checked() {
        let d = BufDesc {
            at: Where::Vmm {
                key: 0x1234_5678_9abc_def0,
                base: 0x1c48_0000_0000,
                size: 40 << 20,
                to: 0b1010,
            },
            off: 4096,
        };
        let e = Entry {
            input: d,
            ..sample()
        };
        assert_eq!(Entry::decode(&e.encode(), 0).unwrap(), e);
        let regs = (0x7f00_0000_0000, 0x7f00_1000_0000);
        assert_eq!(d.check(1, 5, 6, regs).unwrap(), None);
        assert!(d.check(1, 6, 6, regs).is_err(), "same process");
        let past = BufDesc { off: 40 << 20, ..d };
        assert!(past.check(1, 5, 6, regs).is_err());
    }

    #[test]
    fn a_piece_with_a_new_block_id_replaces_the_lists_that_held_the_old() {
        let p = |base: u64, block_id| Piece {
            base,
            size: 20 << 20,
            block_id,
        };
        let mb = 1 << 20;
        let old = [p(0, 1), p(20 * mb, 2)];
        assert!(
            !pieces_replaced(&old, &[p(20 * mb, 2), p(40 * mb, 3)]),
            "shares a piece"
        );
        assert!(!pieces_replaced(&old, &[p(40 * mb, 3)]), "disjoint");
        assert!(
            pieces_replaced(&old, &[p(20 * mb, 9)]),
            "piece 2 was unmapped"
        );
    }

    #[test]
    fn malformed_entries_are_errors() {
        let b = sample().encode();
        for cut in [0, 3, 20, b.len() - 1] {
            let e = Entry::decode(&b[..cut], 3).unwrap_err().to_string();
            assert!(e.contains("rank 3"), "{e}");
        }
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert!(Entry::decode(&bad, 0).is_err());
        let mut bad_kind = b;
        bad_kind[4 + 24 + 8] = 9;
        assert!(Entry::decode(&bad_kind, 0).is_err());
    }

    #[test]
    fn descriptions_past_the_address_space_are_errors() {
        let regs = (0x7f00_0000_0000, 0x7f00_1000_0000);
        let reg = BufDesc {
            at: Where::RegOutput,
            off: 64,
        };
        assert_eq!(reg.check(1, 5, 6, regs).unwrap(), Some(0x7f00_1000_0040));
        let far = BufDesc {
            off: u64::MAX - 8,
            ..reg
        };
        let e = far.check(1, 5, 6, regs).unwrap_err().to_string();
        assert!(e.contains("rank 1") && e.contains("address space"), "{e}");
        let wrap = BufDesc {
            at: Where::Ipc {
                id: 1,
                base: u64::MAX - 16,
                size: 64,
                handle: [0; IPC_HANDLE_LEN],
            },
            off: 0,
        };
        assert!(wrap.check(1, 5, 6, regs).is_err());
        assert!(BufDesc { off: 64, ..wrap }.check(1, 5, 6, regs).is_err());
        let same = BufDesc {
            at: Where::Ipc {
                id: 1,
                base: 0x1000,
                size: 64,
                handle: [0; IPC_HANDLE_LEN],
            },
            off: 0,
        };
        assert!(same.check(1, 6, 6, regs).is_err(), "same process");
        assert_eq!(same.check(1, 5, 6, regs).unwrap(), None);
    }

    #[test]
    fn signature_mismatch_names_the_field() {
        let a = sample().sig;
        assert_eq!(a.mismatch(&a, 1, 0), None);
        let b = Signature { count: 7, ..a };
        let m = a.mismatch(&b, 2, 0).unwrap();
        assert!(m.contains("rank 2") && m.contains("count 7"), "{m}");
        let c = Signature { root: 1, ..a };
        assert!(a.mismatch(&c, 1, 0).unwrap().contains("root 1"));
        assert_eq!(Signature::from_bytes(&a.to_bytes()), a);
    }
}
