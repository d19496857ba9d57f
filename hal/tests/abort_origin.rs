//! A rank that gives up because another rank died tells its peers who died first, so
//! that every rank blames the originating rank, not the one whose connection happened
//! to close first.

use std::time::{Duration, Instant};

use commhal_hal::bootstrap::{Bootstrap, TcpBootstrap, UniqueId};
use commhal_hal::{AbortReason, HalError};

#[test]
fn an_abort_names_its_origin_on_every_peer() {
    let id = UniqueId::new_local().unwrap();
    let timeout = Duration::from_secs(20);
    let boots: Vec<TcpBootstrap> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let id = id.clone();
                s.spawn(move || TcpBootstrap::new(r, 3, &id, timeout).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Rank 0 learned that rank 2 died and gives up, saying so.
    boots[0].abort_job(Some(2), "rank 2 is gone: closed its bootstrap connection");
    let flag = boots[1]
        .peer_failure()
        .expect("a TCP bootstrap has a failure flag");
    let start = Instant::now();
    while !flag.is_set() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "rank 1 never heard"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    match flag.reason() {
        Some(AbortReason::PeerDead { rank: 2, detail }) => {
            assert!(detail.contains("rank 0"), "{detail}")
        }
        other => panic!("rank 1 blames {other:?}, not rank 2"),
    }
    let e = flag.error().unwrap();
    assert!(matches!(e, HalError::PeerDead { rank: 2, .. }), "{e}");
}
