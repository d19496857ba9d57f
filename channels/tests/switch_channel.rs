//! SwitchChannel over host-emu with 3 members: reduce, all-reduce, broadcast, barrier.

mod common;

use commhal_backend_host_emu::HostEmu;
use commhal_channels::{ReduceOp, SwitchChannel};
use commhal_hal::HalError;
use common::ranks;

const N: usize = 1000; // elements

fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn reduce_all_reduce_broadcast_with_three_members() {
    ranks(3, |r, b| {
        let t = HostEmu::new();
        let ch = SwitchChannel::<HostEmu>::create(&t, b, &[0, 1, 2], 8 * N as u64 + 3, 7).unwrap();
        assert!(ch.size() >= 8 * N as u64);
        // Integers at 0, exact floats (small integers) at 4N.
        let ints: Vec<i32> = (0..N as i32).map(|i| i * (r as i32 + 1) - 500).collect();
        let floats: Vec<f32> = (0..N).map(|i| (i % 97) as f32 * (r as f32 + 1.0)).collect();
        ch.write_local(0, &i32s(&ints)).unwrap();
        ch.write_local(
            4 * N as u64,
            &floats
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        ch.barrier().unwrap();

        let mut isum = vec![0i32; N];
        ch.reduce(ReduceOp::Sum, 0, &mut isum).unwrap();
        let want: Vec<i32> = (0..N as i32).map(|i| i * 6 - 1500).collect();
        assert_eq!(isum, want);
        let mut imax = vec![0i32; N];
        ch.reduce(ReduceOp::Max, 0, &mut imax).unwrap();
        assert_eq!(
            imax,
            (0..N as i32)
                .map(|i| (i * 3 - 500).max(i - 500))
                .collect::<Vec<_>>()
        );
        let mut fsum = vec![0f32; N];
        ch.reduce(ReduceOp::Sum, 4 * N as u64, &mut fsum).unwrap();
        assert_eq!(
            fsum,
            (0..N).map(|i| (i % 97) as f32 * 6.0).collect::<Vec<_>>()
        );
        ch.barrier().unwrap();

        // All-reduce of the floats, each member doing a third (its "thread" share).
        ch.device()
            .unwrap()
            .all_reduce::<f32>(ReduceOp::Sum, 4 * N as u64, N as u64, r, 3)
            .unwrap();
        ch.barrier().unwrap();
        let mut got = vec![0u8; 4 * N];
        ch.read_local(4 * N as u64, &mut got).unwrap();
        let got: Vec<f32> = got
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            got,
            (0..N).map(|i| (i % 97) as f32 * 6.0).collect::<Vec<_>>()
        );
        ch.barrier().unwrap();

        // Broadcast from member 1 (unaligned size and offsets).
        if r == 1 {
            ch.write_local(1, &[42u8; 101]).unwrap();
            ch.broadcast(3, 1, 101).unwrap();
        }
        ch.barrier().unwrap();
        let mut got = [0u8; 101];
        ch.read_local(3, &mut got).unwrap();
        assert_eq!(got, [42u8; 101]);
    });
}

#[test]
fn many_barriers_and_errors() {
    ranks(3, |r, b| {
        let t = HostEmu::new();
        let ch = SwitchChannel::<HostEmu>::create(&t, b, &[0, 1, 2], 64, 9).unwrap();
        // A counter each member bumps, checked against the round after each barrier.
        for round in 1..=2000u32 {
            if r == round % 3 {
                ch.broadcast(0, 0, 0).unwrap(); // zero bytes: no-op
                let v = round.to_le_bytes();
                ch.write_local(8, &v).unwrap();
                ch.broadcast(16, 8, 4).unwrap();
            }
            ch.barrier().unwrap();
            let mut got = [0u8; 4];
            ch.read_local(16, &mut got).unwrap();
            assert_eq!(u32::from_le_bytes(got), round);
            ch.barrier().unwrap();
        }
        let mut out = [0i32; 4];
        assert!(matches!(
            ch.reduce(ReduceOp::Sum, 2, &mut out).unwrap_err(),
            HalError::Unaligned { .. }
        ));
        assert!(matches!(
            ch.reduce(ReduceOp::Sum, 60, &mut out).unwrap_err(),
            HalError::OutOfRange { .. }
        ));
        assert!(ch.broadcast(0, 0, 65).is_err());
    });
}
