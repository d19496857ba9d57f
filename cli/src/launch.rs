//! `commhal launch -n N [--] CMD ARGS`: start N local ranks.
//!
//! Every rank gets commhal's variables (`COMMHAL_RANK`, `COMMHAL_WORLD_SIZE`,
//! `COMMHAL_LOCAL_RANK`, `COMMHAL_UNIQUE_ID`) and the torchrun ones (`RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), so
//! commhal programs and PyTorch scripts both find their place. Output is forwarded
//! line by line with a `[rank K]` prefix (and `COMMHAL_LAUNCH_PREFIX=1` set in the
//! ranks, so that `commhal bench --json` / `--csv` can refuse a stdout that would
//! break the format and point at `-J FILE`; `--no-prefix` forwards lines as they
//! are). When one rank fails, `launch` names it, gives
//! the others a short window to report (a rank that notices a dead peer says so within
//! about 2 s), then stops those still running (SIGTERM, then SIGKILL after the grace
//! period), naming them as possibly hung, and exits with the first failure's code.
//! Every signal but SIGKILL is followed by SIGCONT, so a stopped rank (SIGSTOP: a hung
//! peer in `commhal-gpu-bench --stop-rank`, a debugger) handles it at once.
//!
//! Each rank runs in its own process group, so stopping a rank stops whatever it
//! started too (a shell's children, a sanitizer's target). SIGINT, SIGTERM and SIGHUP
//! sent to `launch` are forwarded to every rank's group; ranks still running after the
//! grace period are killed and `launch` exits with 128 + the signal. Ranks start with
//! no signal blocked and are killed by the kernel if `launch` itself dies
//! ([`crate::child`]).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::Pid;

use commhal_hal::bootstrap::UniqueId;
use commhal_hal::settings::launch::{LAUNCH_PREFIX, LOCAL_RANK, RANK, UNIQUE_ID, WORLD_SIZE};

/// Options of `commhal launch`.
#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    /// Number of ranks to start on this machine.
    #[arg(short = 'n', long = "nranks", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub nranks: u32,
    /// Seconds to wait after SIGTERM before SIGKILL when stopping ranks.
    #[arg(long, default_value_t = 5)]
    pub grace: u64,
    /// Do not prefix output lines with the rank.
    #[arg(long)]
    pub no_prefix: bool,
    /// The program to run, then its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// Start `n` ranks of this very executable, each with `args`, under [`run`] (no rank
/// prefix on their output: the benchmarks print one table from rank 0).
pub fn self_launch(n: u32, args: Vec<String>) -> Result<i32, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let mut command = vec![exe.to_string_lossy().to_string()];
    command.extend(args);
    run(&LaunchArgs {
        nranks: n,
        grace: 5,
        no_prefix: true,
        command,
    })
}

/// `args` without any `--ranks N` or `--ranks=N`.
pub fn without_ranks(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
            continue;
        }
        if a == "--ranks" {
            skip = true;
            continue;
        }
        if a.starts_with("--ranks=") {
            continue;
        }
        out.push(a);
    }
    out
}

/// Run the ranks; returns the exit code for the launcher.
pub fn run(args: &LaunchArgs) -> Result<i32, String> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or("launch: no command given")?;
    let id =
        UniqueId::new_local().map_err(|e| format!("launch: cannot create a unique id: {e}"))?;
    // torchrun's MASTER_PORT belongs to PyTorch's TCPStore: give it a port of its own
    // so a PyTorch script under `commhal launch` does not collide with commhal's root.
    let master_port = UniqueId::new_local()
        .map_err(|e| format!("launch: cannot find a free port for MASTER_PORT: {e}"))?
        .addr()
        .port()
        .to_string();
    let id_string = id.to_string();

    let groups = Arc::new(Mutex::new(Vec::<i32>::new()));
    let interrupted = Arc::new(AtomicI32::new(0));
    forward_signals(Arc::clone(&groups), Arc::clone(&interrupted))?;
    let grace = Duration::from_secs(args.grace);
    // Each rank's exit is reported by a thread blocked in `wait`, the moment it
    // happens: the order of arrival is the order of the exits (a poll would see a
    // crashed rank and the rank that noticed it in the same sweep, in rank order).
    let (exits_tx, exits) = mpsc::channel::<(u32, ExitStatus)>();
    let mut ranks = Ranks::default();
    let mut forwarders = Vec::new();
    for rank in 0..args.nranks {
        let mut cmd = Command::new(program);
        cmd.args(rest)
            .env(RANK.env, rank.to_string())
            .env(WORLD_SIZE.env, args.nranks.to_string())
            .env(LOCAL_RANK.env, rank.to_string())
            .env(UNIQUE_ID.env, &id_string)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", args.nranks.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("LOCAL_WORLD_SIZE", args.nranks.to_string())
            .env("MASTER_ADDR", id.addr().ip().to_string())
            .env("MASTER_PORT", &master_port)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // tells a benchmark that its stdout is prefixed (JSON / CSV must go to a file)
        if args.no_prefix {
            cmd.env_remove(LAUNCH_PREFIX.env);
        } else {
            cmd.env(LAUNCH_PREFIX.env, "1");
        }
        crate::child::prepare(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                ranks.signal(Signal::SIGTERM);
                ranks.wait_or_kill(&exits, grace);
                return Err(format!(
                    "launch: cannot start `{program}` for rank {rank}: {e}"
                ));
            }
        };
        // The group joins the list before anything else can run: a signal to `launch`
        // that arrives from here on reaches it through the signal thread, and one that
        // arrived while it was starting is sent to it now (else that rank would run on
        // until the grace period's SIGKILL).
        if let Ok(mut g) = groups.lock() {
            g.push(child.id() as i32);
            let sig = interrupted.load(Ordering::SeqCst);
            if let Ok(sig) = Signal::try_from(sig)
                && sig != Signal::SIGKILL
            {
                signal_group(child.id() as i32, sig);
            }
        }
        let prefix = if args.no_prefix {
            String::new()
        } else {
            format!("[rank {rank}] ")
        };
        if let Some(out) = child.stdout.take() {
            let p = prefix.clone();
            forwarders.push(thread::spawn(move || forward(out, p, false)));
        }
        if let Some(err) = child.stderr.take() {
            forwarders.push(thread::spawn(move || forward(err, prefix, true)));
        }
        ranks.pids.push(child.id() as i32);
        ranks.running.push(true);
        let tx = exits_tx.clone();
        thread::spawn(move || {
            let status = child.wait();
            // A failed `wait` is reported as a failure of the rank.
            let status = status.unwrap_or_else(|_| {
                use std::os::unix::process::ExitStatusExt;
                ExitStatus::from_raw(1 << 8)
            });
            let _ = tx.send((rank, status));
        });
    }
    drop(exits_tx);

    let mut failed: Option<(u32, ExitStatus)> = None;
    let mut signalled = 0;
    let mut phase = Phase::Running;
    while ranks.any_running() {
        if let Ok((rank, status)) = exits.recv_timeout(Duration::from_millis(20)) {
            ranks.running[rank as usize] = false;
            let remaining = ranks.running.iter().filter(|r| **r).count();
            // After a signal to `launch`, ranks dying of it are no failure to report.
            let interrupted_now = signalled != 0 || interrupted.load(Ordering::SeqCst) != 0;
            if !status.success() && failed.is_none() && !interrupted_now {
                failed = Some((rank, status));
                eprintln!(
                    "commhal launch: rank {rank} failed ({}) first; the {remaining} other running rank(s) get {} s to report, then are stopped",
                    describe(status),
                    REPORT_WINDOW.as_secs()
                );
                if matches!(phase, Phase::Running) {
                    phase = Phase::Reporting(Instant::now() + REPORT_WINDOW);
                }
            }
            continue;
        }
        let sig = interrupted.load(Ordering::SeqCst);
        if sig != 0 && signalled == 0 {
            // The signal thread already forwarded it to every rank's group.
            signalled = sig;
            if !matches!(phase, Phase::Terminating(_) | Phase::Killed) {
                phase = Phase::Terminating(Instant::now() + grace);
            }
        }
        let now = Instant::now();
        match phase {
            Phase::Reporting(until) if now >= until => {
                if let Some((first, _)) = failed {
                    let running: Vec<String> =
                        ranks.running_ranks().map(|r| r.to_string()).collect();
                    eprintln!(
                        "commhal launch: rank(s) {} still running {} s after rank {first} failed; stopping them (if the failed ranks timed out waiting for one of these, that one hung)",
                        running.join(", "),
                        REPORT_WINDOW.as_secs()
                    );
                }
                ranks.signal(Signal::SIGTERM);
                phase = Phase::Terminating(now + grace);
            }
            Phase::Terminating(kill_at) if now >= kill_at => {
                ranks.signal(Signal::SIGKILL);
                phase = Phase::Killed;
            }
            _ => {}
        }
    }
    if signalled == 0 {
        // A signal whose ranks all died before the loop looked at the flag.
        signalled = interrupted.load(Ordering::SeqCst);
    }
    // Whatever a rank left behind in its group would keep our output pipes open.
    if let Ok(g) = groups.lock() {
        for &pgid in g.iter() {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
    for f in forwarders {
        let _ = f.join();
    }
    if signalled != 0 {
        eprintln!("commhal launch: stopped by signal {signalled}");
        return Ok(128 + signalled);
    }
    Ok(match failed {
        None => 0,
        Some((_, status)) => exit_code(status),
    })
}

/// How long ranks still running after the first failure may take to exit on their own
/// (a rank that notices a dead peer reports it within about 2 s) before SIGTERM.
const REPORT_WINDOW: Duration = Duration::from_secs(3);

/// Where the launch stands.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Every rank running or exited cleanly.
    Running,
    /// A rank failed; the others may report until then.
    Reporting(Instant),
    /// SIGTERM (or the user's signal) sent; SIGKILL at that time.
    Terminating(Instant),
    /// SIGKILL sent.
    Killed,
}

/// The started ranks: process (group) id and whether its exit is still to come.
#[derive(Debug, Default)]
struct Ranks {
    pids: Vec<i32>,
    running: Vec<bool>,
}

impl Ranks {
    fn any_running(&self) -> bool {
        self.running.iter().any(|r| *r)
    }

    fn running_ranks(&self) -> impl Iterator<Item = usize> + '_ {
        self.running
            .iter()
            .enumerate()
            .filter_map(|(r, running)| running.then_some(r))
    }

    /// Send `sig` to the process group of every rank still running.
    fn signal(&self, sig: Signal) {
        for r in self.running_ranks() {
            signal_group(self.pids[r], sig);
        }
    }

    /// Wait up to `grace` for every rank to exit, then SIGKILL those still alive.
    fn wait_or_kill(&mut self, exits: &mpsc::Receiver<(u32, ExitStatus)>, grace: Duration) {
        let deadline = Instant::now() + grace;
        while self.any_running() && Instant::now() < deadline {
            if let Ok((r, _)) = exits.recv_timeout(Duration::from_millis(20)) {
                self.running[r as usize] = false;
            }
        }
        self.signal(Signal::SIGKILL);
    }
}

/// Send `sig` to the process group `pgid`, then SIGCONT: a stopped rank (SIGSTOP, a
/// fault check's hung peer, a debugger's stop) acts on no signal but SIGKILL until it
/// is continued, so without it SIGTERM would wait out the grace period.
fn signal_group(pgid: i32, sig: Signal) {
    let group = Pid::from_raw(pgid);
    let _ = killpg(group, sig);
    if sig != Signal::SIGKILL {
        let _ = killpg(group, Signal::SIGCONT);
    }
}

fn forward(stream: impl std::io::Read, prefix: String, is_err: bool) {
    let reader = BufReader::new(stream);
    for line in reader.split(b'\n') {
        let Ok(line) = line else { break };
        let text = String::from_utf8_lossy(&line);
        if is_err {
            let mut e = std::io::stderr().lock();
            let _ = writeln!(e, "{prefix}{text}");
        } else {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "{prefix}{text}");
        }
    }
}

/// Block SIGINT/SIGTERM/SIGHUP in this thread (threads spawned later inherit the mask;
/// children get an empty one from [`crate::child::prepare`]) and forward each one
/// received to every rank's process group from a dedicated thread, recording the first
/// in `interrupted` so that the launch stops the ranks and exits non-zero.
fn forward_signals(
    groups: Arc<Mutex<Vec<i32>>>,
    interrupted: Arc<AtomicI32>,
) -> Result<(), String> {
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    set.thread_block()
        .map_err(|e| format!("launch: cannot block signals: {e}"))?;
    thread::spawn(move || {
        while let Ok(sig) = set.wait() {
            eprintln!("commhal launch: got {sig}, forwarding it to every rank");
            let _ = interrupted.compare_exchange(0, sig as i32, Ordering::SeqCst, Ordering::SeqCst);
            if let Ok(g) = groups.lock() {
                for &pgid in g.iter() {
                    signal_group(pgid, sig);
                }
            }
        }
    });
    Ok(())
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "unknown status".into(),
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => 1,
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}
