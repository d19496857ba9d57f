//! send/recv and groups: rings, both directions at once, big (multi-piece) messages.

mod common;

use common::with_ranks;

fn pattern(from: u32, to: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 * 31 + from * 7 + to * 3) as u8)
        .collect()
}

#[test]
fn ring_and_exchange_of_many_sizes() {
    for n in [2u32, 3, 5] {
        with_ranks(n, n, None, |comm| {
            let (me, n) = (comm.rank(), comm.size());
            let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
            for len in [0usize, 1, 1000, 300_000, 1_300_000] {
                let data = pattern(me, next, len);
                let mut out = vec![0u8; len];
                let mut g = comm.group_start();
                g.send(next, &data).unwrap();
                g.recv(prev, &mut out).unwrap();
                g.group_end().unwrap();
                assert_eq!(out, pattern(prev, me, len), "n={n} len={len}");
            }
        });
    }
}

#[test]
fn blocking_send_recv_pairs() {
    with_ranks(2, 2, None, |comm| {
        let len = 700_000;
        if comm.rank() == 0 {
            comm.send(1, &pattern(0, 1, len)).unwrap();
            let mut out = vec![0u8; len];
            comm.recv(1, &mut out).unwrap();
            assert_eq!(out, pattern(1, 0, len));
        } else {
            let mut out = vec![0u8; len];
            comm.recv(0, &mut out).unwrap();
            assert_eq!(out, pattern(0, 1, len));
            comm.send(0, &pattern(1, 0, len)).unwrap();
        }
    });
}
