//! The case list: every case of `docs/conformance.md`, fanned out over the backend's channel
//! kinds and memory kind, with its parameters. Every rank builds the same list.
//!
//! | # | cases | channels |
//! |---|---|---|
//! | 1 | `message-passing/n=..,off=..` | memory, port |
//! | 2 | `put-with-signal`, `put-with-signal-and-flush` (port) | memory, port |
//! | 3 | `strong-vs-weak-signal` | memory, port |
//! | 4 | `signal-counting/start=..` (0, 2^32-3, 2^64-3) | memory, port |
//! | 5 | `relaxed-signal-wait` | memory, port |
//! | 6, 7 | `flush-source-reusable`, `flush-remote-visible` | memory, port |
//! | 8 | `put-put-ordering` | memory, port |
//! | 9 | `peers-independent` (≥ 3 ranks) | memory, port |
//! | 10 | `get-after-signal` | memory |
//! | 11 | `ping-pong` | memory, port |
//! | 12 | `shared-connection` | memory, port |
//! | 13 | `proxy-fifo/depth=..` | port |
//! | 14 | `ll-packets/fmt=ll8`, `fmt=ll16` | memory |
//! | 15 | `reduce/dtype=..`, `broadcast`, `barriers` | switch |
//! | 16 | `edges` | memory, port, switch |
//! | 17 | `registration-lifecycle` | memory, port |
//! | 18 | `graph-capture` | all |
//! | 19 | `honest-capabilities` | all |
//! | 20 | `stress-message-passing`, `stress-strong-signal`, `stress-put-put` | memory, port |
//! | 21 | `collective/coll=..,algo=..,nodes=..` (host-emu: 1 node; host-tcp, ib-verbs: 2 virtual nodes) | all |
//! | 22 | `collective-dead-peer/nodes=..` | all |
//! | 23 | `port-read/n=..,off=..` | port |
//! | 24 | `write-copies-source/n=..,off=..` | port |

pub mod collectives;
pub mod p2p;
pub mod port_read;
pub mod setup;
pub mod special;
pub mod switch;
pub mod write_copies;

use commhal_channels::packet::LlFormat;

use crate::case::{Case, ChannelKind as K};
use crate::world::{World, guarantees_of, mem_kind_name};
use p2p::Fused;

fn with(mem: &str, extra: &str) -> String {
    if extra.is_empty() {
        mem.to_string()
    } else {
        format!("{mem},{extra}")
    }
}

/// Every case, in run order.
pub fn all(world: &World) -> Vec<Case> {
    let plan = &world.plan;
    let mem = world.mem_kind.map(mem_kind_name).unwrap_or("no-memory");
    let mut v = Vec::new();
    for kind in [K::Memory, K::Port] {
        let mut sizes = vec![1u64, 7, 16, 4096 + 3, 1 << 20];
        if !plan.quick {
            sizes.push(64 << 20);
        }
        for &n in &sizes {
            for off in [0u64, 3] {
                let rounds = match n {
                    n if n >= 64 << 20 => 3,
                    n if n >= 1 << 20 => plan.count(3, 20),
                    _ => plan.count(20, 500),
                };
                v.push(
                    Case::new(
                        kind,
                        1,
                        "message-passing",
                        "put(n bytes of i); signal; the peer's wait ⇒ every byte is i",
                        move |c| {
                            p2p::message_passing(c, kind, n, off, rounds, Fused::Separate, false)
                        },
                    )
                    .needs("strong-signal")
                    .params(with(mem, &format!("n={n},off={off}"))),
                );
            }
        }
        let rounds = plan.count(50, 1000);
        v.push(
            Case::new(
                kind,
                2,
                "put-with-signal",
                "fused put_with_signal: the signal ⇒ its data visible",
                move |c| p2p::message_passing(c, kind, 4099, 3, rounds, Fused::WithSignal, false),
            )
            .params(mem),
        );
        if kind == K::Port {
            v.push(
                Case::new(
                    kind,
                    2,
                    "put-with-signal-and-flush",
                    "fused put+signal+flush: the signal ⇒ its data visible; flush returns",
                    move |c| {
                        p2p::message_passing(
                            c,
                            kind,
                            4099,
                            3,
                            rounds,
                            Fused::WithSignalAndFlush,
                            false,
                        )
                    },
                )
                .params(mem),
            );
        }
        v.push(
            Case::new(kind, 3, "strong-vs-weak-signal", "put(A); put_with_signal(B); wait ⇒ B visible, and A visible iff strong signals are claimed", move |c| {
                p2p::signal_strength(c, kind, rounds, false)
            })
            .covers("strong-signal")
            .params(mem),
        );
        for (label, start) in [
            ("0", 0u64),
            ("2^32-3", (1u64 << 32) - 3),
            ("2^64-3", u64::MAX - 2),
        ] {
            v.push(
                Case::new(kind, 4, "signal-counting", "k signals from several threads satisfy exactly k waits; next poll false; a bounded wait then times out cleanly", move |c| {
                    p2p::signal_counting(c, kind, start)
                })
                .params(with(mem, &format!("start={label}"))),
            );
        }
        v.push(
            Case::new(
                kind,
                5,
                "relaxed-signal-wait",
                "relaxed signals and waits pair one to one (execution order only)",
                move |c| p2p::relaxed(c, kind),
            )
            .params(mem),
        );
        v.push(
            Case::new(
                kind,
                6,
                "flush-source-reusable",
                "put; flush; overwrite source; signal ⇒ the peer sees the old values",
                move |c| p2p::flush_source_reusable(c, kind),
            )
            .needs("flush-source-reusable")
            .needs("strong-signal")
            .params(mem),
        );
        v.push(
            Case::new(
                kind,
                7,
                "flush-remote-visible",
                "put; flush; out-of-band barrier (no signal) ⇒ the peer reads the new values",
                move |c| p2p::flush_remote_visible(c, kind),
            )
            .needs("flush-remote-visible")
            .params(mem),
        );
        v.push(
            Case::new(
                kind,
                8,
                "put-put-ordering",
                "put(X); put(Y); the peer that sees Y sees X",
                move |c| p2p::put_put(c, kind, rounds, false),
            )
            .needs("put-put-ordered")
            .params(mem),
        );
        v.push(
            Case::new(
                kind,
                9,
                "peers-independent",
                "signals to rank 1 say nothing to rank 2; puts + flush of both reach both",
                move |c| p2p::peers_independent(c, kind),
            )
            .min_ranks(3)
            .params(mem),
        );
        if kind == K::Memory {
            v.push(
                Case::new(
                    kind,
                    10,
                    "get-after-signal",
                    "the peer writes then signals ⇒ get returns the new data",
                    move |c| p2p::get_after_signal(c, kind),
                )
                .needs("get")
                .params(mem),
            );
        }
        let pp = plan.count(1000, 100_000);
        v.push(
            Case::new(
                kind,
                11,
                "ping-pong",
                "signal/wait ping-pong both ways completes without deadlock",
                move |c| p2p::ping_pong(c, kind, pp),
            )
            .params(with(mem, &format!("rounds={pp}"))),
        );
        v.push(
            Case::new(kind, 12, "shared-connection", "channels on one connection stay independent; concurrent put+flush from several threads is safe", move |c| {
                p2p::shared_connection(c, kind)
            })
            .params(mem),
        );
        if kind == K::Port {
            for (n, off) in [(1u64, 0u64), (4099, 3), ((1 << 20) + 3, 3)] {
                v.push(
                    Case::new(kind, 23, "port-read", "Port::read returns, once flush returned, every byte of the port's earlier write to that range and of what the peer stored before a signal it waited for; 0 bytes no-op; out-of-range refused", move |c| {
                        port_read::port_read(c, n, off)
                    })
                    .needs("get")
                    .params(with(mem, &format!("n={n},off={off}"))),
                );
            }
            for (n, off) in [(1u64, 0u64), (4099, 3), ((1 << 20) + 3, 3)] {
                v.push(
                    Case::new(kind, 24, "write-copies-source", "write; overwrite the source at once; signal; flush ⇒ the peer got the original bytes", move |c| {
                        write_copies::write_copies_source(c, n, off)
                    })
                    .needs("write-copies-source")
                    .params(with(mem, &format!("n={n},off={off}"))),
                );
            }
            let claimed = guarantees_of(&world.backend, K::Port).map_or(0, |g| g.fifo_depth);
            let mut depths = vec![4u64];
            if claimed > 4 && u64::from(claimed).is_power_of_two() {
                depths.push(u64::from(claimed));
            }
            for depth in depths {
                v.push(
                    Case::new(kind, 13, "proxy-fifo", "more triggers than the FIFO depth all arrive in order (back-pressure, wrap-around); zero-size trigger; bad depths rejected", move |c| {
                        special::proxy_fifo(c, depth)
                    })
                    .params(with(mem, &format!("depth={depth}"))),
                );
            }
        }
        if kind == K::Memory {
            for (fmt, claim, label) in [
                (LlFormat::Ll8, "ll8", "fmt=ll8"),
                (LlFormat::Ll16, "ll16", "fmt=ll16"),
            ] {
                v.push(
                    Case::new(kind, 14, "ll-packets", "every LL element read comes with its own flag from the same write, across the flag wrap", move |c| {
                        special::ll_packets(c, fmt)
                    })
                    .needs(claim)
                    .params(with(mem, label)),
                );
            }
        }
        v.push(
            Case::new(kind, 16, "edges", "0 bytes no-op; 1 byte; non-multiples of 16; region ends; whole region; out-of-range and unregistered memory rejected", move |c| {
                p2p::edges(c, kind)
            })
            .params(mem),
        );
        v.push(
            Case::new(kind, 17, "registration-lifecycle", "export/import round trip; double registration; release while in use is an error; teardown after failure frees everything", move |c| match kind {
                K::Memory => special::lifecycle_memory(c),
                _ => special::lifecycle_port(c),
            })
            .params(mem),
        );
        let sr = plan.count(200, 20_000);
        v.push(
            Case::new(kind, 20, "stress-message-passing", "case 1 with random delays and threads hammering unrelated memory: zero weak observations", move |c| {
                p2p::message_passing(c, kind, 4099, 3, sr, Fused::Separate, true)
            })
            .needs("strong-signal")
            .params(with(mem, &format!("rounds={sr}"))),
        );
        v.push(
            Case::new(
                kind,
                20,
                "stress-strong-vs-weak-signal",
                "case 3 under stress: reorders counted (zero where strong signals are claimed)",
                move |c| p2p::signal_strength(c, kind, sr, true),
            )
            .covers("strong-signal")
            .params(with(mem, &format!("rounds={sr}"))),
        );
        v.push(
            Case::new(
                kind,
                20,
                "stress-put-put-ordering",
                "case 8 under stress: zero weak observations",
                move |c| p2p::put_put(c, kind, sr, true),
            )
            .needs("put-put-ordered")
            .params(with(mem, &format!("rounds={sr}"))),
        );
    }
    let s = K::Switch;
    let reduce_property = "reduce equals the host reference on exact inputs (sum, min, max)";
    v.push(
        Case::new(s, 15, "reduce", reduce_property, |c| {
            switch::reduce::<u32>(c, |r, i| {
                (r.wrapping_mul(1_000_003)).wrapping_add(i as u32 * 7)
            })
        })
        .params(with(mem, "dtype=u32")),
    );
    v.push(
        Case::new(s, 15, "reduce", reduce_property, |c| {
            switch::reduce::<i64>(c, |r, i| {
                (i as i64 - 500) * (i64::from(r) + 1) * 1_000_000_007
            })
        })
        .params(with(mem, "dtype=i64")),
    );
    v.push(
        Case::new(s, 15, "reduce", reduce_property, |c| {
            switch::reduce::<f64>(c, |r, i| ((i % 97) as f64 - 48.0) * f64::from(r + 1))
        })
        .params(with(mem, "dtype=f64")),
    );
    v.push(
        Case::new(
            s,
            15,
            "broadcast",
            "a broadcast from every root is visible to all after the barrier",
            switch::broadcast,
        )
        .params(mem),
    );
    v.push(
        Case::new(
            s,
            15,
            "barriers",
            "repeated group barriers keep every member in step",
            switch::barriers,
        )
        .params(mem),
    );
    v.push(
        Case::new(
            s,
            16,
            "edges",
            "out-of-range and misaligned reduce/broadcast offsets are rejected",
            switch::edges,
        )
        .params(mem),
    );
    if let Some(layout) = collectives::Layout::for_backend(&plan.backend) {
        for algo in commhal_algorithms::builders::Algorithm::ALL {
            let coll = algo.collective();
            v.push(
                Case::new(
                    K::All,
                    21,
                    "collective",
                    "every rank's output of the forced algorithm equals the host reference exactly (odd counts included)",
                    move |c| collectives::collective(c, layout, algo),
                )
                .params(format!(
                    "coll={},algo={},{}",
                    coll.name(),
                    algo.short_name(),
                    layout.param()
                )),
            );
        }
        v.push(
            Case::new(
                K::All,
                22,
                "collective-dead-peer",
                "a rank that leaves mid-job makes every other rank's pending all-reduce fail within the bound: never a pass, never a hang",
                move |c| collectives::dead_peer(c, layout),
            )
            .params(layout.param()),
        );
    }
    v.push(
        Case::new(
            K::All,
            18,
            "graph-capture",
            "operations captured into a CUDA/HIP graph replay N times with the same results",
            |_| {
                Err(crate::case::Failure::Fail(
                    "the graph-capture case is not written yet (needs a GPU backend to drive)"
                        .into(),
                ))
            },
        )
        .needs("graph-capture"),
    );
    v.push(Case::new(
        K::All,
        19,
        "honest-capabilities",
        "every guarantee the backend claims is exercised by at least one case",
        |c| {
            let cases = all(&c.world);
            let missing = uncovered_claims(&cases, &c.world);
            crate::ensure!(
                missing.is_empty(),
                "claimed but exercised by no case: {} (write a case or drop the claim)",
                missing.join(", ")
            );
            Ok(Some("every claimed guarantee has a case".into()))
        },
    ));
    v
}

/// Claims some transport of the backend makes that no case (on a channel kind the
/// backend has, or `all`) covers.
pub fn uncovered_claims(cases: &[Case], world: &World) -> Vec<String> {
    let kinds = [K::Memory, K::Port, K::Switch];
    let mut missing = Vec::new();
    for kind in kinds {
        let Some(g) = guarantees_of(&world.backend, kind) else {
            continue;
        };
        for (claim, claimed) in g.claims() {
            if !claimed || missing.iter().any(|m: &String| m.starts_with(claim)) {
                continue;
            }
            let covered = cases.iter().any(|c| {
                c.covers.contains(&claim)
                    && (c.channel == K::All || guarantees_of(&world.backend, c.channel).is_some())
            });
            if !covered {
                missing.push(format!("{claim} ({} transport)", kind.as_str()));
            }
        }
    }
    missing
}
