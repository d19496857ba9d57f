//! LL ("low latency") packet formats: data travels with a flag in the same atomic store,
//! so a reader that sees the flag of the current epoch also sees the data — no separate
//! signal is needed.
//!
//! * **LL8**: one 8-byte word = 4 data bytes (low half) + 4 flag bytes (high half),
//!   written with one 8-byte atomic store.
//! * **LL16**: two such words (8 data bytes, 2 flags). On GPUs it is one 16-byte store;
//!   x86-64 does not architecturally promise 16-byte stores are atomic, so host-emu
//!   writes the two words with two 8-byte atomic stores, each carrying its own flag, and
//!   the reader accepts the packet only once *both* flags match. This is exactly what
//!   an LL16 packet is, and it never shows data without its flag.
//!
//! **Orderings.** Packet words are stored with `Release` and loaded with `Acquire`.
//! Atomicity of the word alone already ties data to flag; release/acquire additionally
//! makes writes the sender did before the packet visible to a reader that saw it.
//!
//! **Epochs.** Scratch starts zeroed; flag 0 never marks valid data. Each round uses a
//! new flag ([`PacketEpoch::flag`], cycling through 1..=u32::MAX) and alternates between
//! two halves of a double-buffered scratch ([`PacketEpoch::half`]), so a round never
//! overwrites packets the peer may still be reading from the previous round, and stale
//! packets never carry the current flag.

/// Which LL packet format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlFormat {
    /// 8-byte packets: 4 data bytes + a 4-byte flag.
    Ll8,
    /// 16-byte packets: two (4 data bytes, 4-byte flag) words.
    Ll16,
}

impl LlFormat {
    /// Bytes of one packet in scratch memory (also its required alignment).
    pub const fn packet_bytes(self) -> u64 {
        match self {
            LlFormat::Ll8 => 8,
            LlFormat::Ll16 => 16,
        }
    }

    /// Payload bytes carried by one packet.
    pub const fn data_bytes(self) -> u64 {
        match self {
            LlFormat::Ll8 => 4,
            LlFormat::Ll16 => 8,
        }
    }

    /// 8-byte words per packet.
    pub const fn words(self) -> u64 {
        self.packet_bytes() / 8
    }

    /// Packets needed for `bytes` of payload (the last one zero-padded).
    pub const fn packets_for(self, bytes: u64) -> u64 {
        bytes.div_ceil(self.data_bytes())
    }

    /// Scratch bytes needed for `bytes` of payload.
    pub const fn scratch_bytes(self, bytes: u64) -> u64 {
        self.packets_for(bytes) * self.packet_bytes()
    }
}

/// One LL word: `data` in the low 32 bits, `flag` in the high 32 bits.
#[inline]
pub const fn ll_word(data: u32, flag: u32) -> u64 {
    ((flag as u64) << 32) | data as u64
}

/// Split an LL word into `(data, flag)`.
#[inline]
pub const fn ll_split(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

/// Round counter for packet exchanges: gives each round its flag and its scratch half.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketEpoch {
    round: u64,
}

impl PacketEpoch {
    /// Round 0 (flag 1, half 0).
    pub const fn new() -> Self {
        PacketEpoch { round: 0 }
    }

    /// Start at an arbitrary round (tests use this to cross the flag wrap).
    pub const fn starting_at(round: u64) -> Self {
        PacketEpoch { round }
    }

    /// The round number.
    pub const fn round(&self) -> u64 {
        self.round
    }

    /// The flag of this round: 1..=u32::MAX, then back to 1 (0 is never used).
    pub const fn flag(&self) -> u32 {
        (self.round % (u32::MAX as u64)) as u32 + 1
    }

    /// Which half of a double-buffered scratch this round uses (0 or 1).
    pub const fn half(&self) -> u64 {
        self.round & 1
    }

    /// Offset of this round's half in a scratch of two halves of `half_bytes` each.
    pub const fn offset(&self, half_bytes: u64) -> u64 {
        self.half() * half_bytes
    }

    /// Move to the next round.
    pub fn advance(&mut self) {
        self.round = self.round.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_flag_wraps_skipping_zero_and_keeps_alternating_halves() {
        let mut e = PacketEpoch::starting_at(u32::MAX as u64 - 2);
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push((e.flag(), e.half()));
            e.advance();
        }
        assert_eq!(
            seen,
            vec![(u32::MAX - 1, 1), (u32::MAX, 0), (1, 1), (2, 0), (3, 1)]
        );
    }

    #[test]
    fn word_round_trip() {
        assert_eq!(ll_split(ll_word(0xdead_beef, 7)), (0xdead_beef, 7));
        assert_eq!(LlFormat::Ll8.scratch_bytes(7), 16);
        assert_eq!(LlFormat::Ll16.scratch_bytes(7), 16);
        assert_eq!(LlFormat::Ll16.scratch_bytes(9), 32);
    }
}
