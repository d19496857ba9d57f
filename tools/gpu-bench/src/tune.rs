//! The tuner's arithmetic: from per-size timings of every candidate kernel to one
//! kernel per size ([`assign`]), thresholds ([`Derived`]) and the tuning file it writes
//! back ([`merged`]). The file format, its parsing and the thresholds a communicator
//! resolves at run time stay in the library ([`commhal_cuda_coll::tuning`]).

use commhal_cuda_coll::layout;

use commhal_cuda_coll::error::{CollError, Result};
use commhal_cuda_coll::tuning::*;

/// One kernel per size from timings: `times[size][candidate]` in µs (`None`: not run
/// at that size), candidates ordered from the small-message kernel to the large one.
/// The choice is monotone (a later candidate never hands back to an earlier one as
/// the size grows) and minimises the sum over sizes of `time / best time at that
/// size`; ties go to the earlier candidate. Sizes where nothing ran get `None`.
pub fn assign(times: &[Vec<Option<f64>>]) -> Vec<Option<usize>> {
    assign_costs(&relative(times))
}

/// The first `k` candidates' columns of a sweep (the later ones are derived apart).
pub fn first_columns(times: &[Vec<Option<f64>>], k: usize) -> Vec<Vec<Option<f64>>> {
    columns(times, 0..k)
}

/// Columns `cols` of a sweep (rows shorter than that give what they have).
pub fn columns(times: &[Vec<Option<f64>>], cols: std::ops::Range<usize>) -> Vec<Vec<Option<f64>>> {
    times
        .iter()
        .map(|r| r.iter().take(cols.end).skip(cols.start).copied().collect())
        .collect()
}

/// `time / best time` per size (`None` where not run or not positive).
pub fn relative(times: &[Vec<Option<f64>>]) -> Vec<Vec<Option<f64>>> {
    times
        .iter()
        .map(|row| {
            let best = row
                .iter()
                .flatten()
                .copied()
                .filter(|t| t.is_finite() && *t > 0.0)
                .fold(f64::INFINITY, f64::min);
            row.iter()
                .map(|t| t.filter(|t| t.is_finite() && *t > 0.0).map(|t| t / best))
                .collect()
        })
        .collect()
}

/// Element-wise sum of two cost tables of the same shape (`None` if either is).
pub fn add_costs(a: &[Vec<Option<f64>>], b: &[Vec<Option<f64>>]) -> Vec<Vec<Option<f64>>> {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.iter().zip(y).map(|(p, q)| Some((*p)? + (*q)?)).collect())
        .collect()
}

/// [`assign`] on precomputed costs (lower is better).
pub fn assign_costs(costs: &[Vec<Option<f64>>]) -> Vec<Option<usize>> {
    let k = costs.iter().map(Vec::len).max().unwrap_or(0);
    let live: Vec<usize> = (0..costs.len())
        .filter(|&i| costs[i].iter().any(Option::is_some))
        .collect();
    if k == 0 || live.is_empty() {
        return vec![None; costs.len()];
    }
    // dp[c]: least cost of the sizes so far with the last one on candidate c.
    let mut dp = vec![f64::INFINITY; k];
    let mut back: Vec<Vec<usize>> = Vec::with_capacity(live.len());
    for (step, &i) in live.iter().enumerate() {
        let mut next = vec![f64::INFINITY; k];
        let mut from = vec![0usize; k];
        // best predecessor ≤ c (earliest on ties)
        let (mut best, mut arg) = (f64::INFINITY, 0usize);
        for c in 0..k {
            if step > 0 && dp[c] < best {
                best = dp[c];
                arg = c;
            }
            let prev = if step == 0 { 0.0 } else { best };
            if let Some(Some(x)) = costs[i].get(c)
                && prev.is_finite()
            {
                next[c] = prev + x;
                from[c] = arg;
            }
        }
        dp = next;
        back.push(from);
    }
    let mut out = vec![None; costs.len()];
    let (mut c, mut best) = (0usize, f64::INFINITY);
    for (j, &v) in dp.iter().enumerate() {
        if v < best {
            best = v;
            c = j;
        }
    }
    if !best.is_finite() {
        return out;
    }
    for (step, &i) in live.iter().enumerate().rev() {
        out[i] = Some(c);
        c = back[step][c];
    }
    out
}

/// The sizes assigned candidate `c`, or `None` when `c` never ran (nothing to derive).
fn chosen_sizes<'a>(
    sizes: &'a [u64],
    times: &[Vec<Option<f64>>],
    choice: &'a [Option<usize>],
    c: usize,
) -> Option<impl Iterator<Item = u64> + 'a> {
    let ran = times.iter().any(|r| r.get(c).copied().flatten().is_some());
    ran.then(|| {
        sizes
            .iter()
            .zip(choice)
            .filter(move |(_, ch)| **ch == Some(c))
            .map(|(s, _)| *s)
    })
}

/// A copy-engine threshold from a sweep whose column `col` is the copy-engine
/// candidate (`None` when it never ran): the smallest size from which that column is
/// the fastest (ties included) at that size and at every larger size it ran, else 0
/// (never).
pub fn ce_suffix(sizes: &[u64], times: &[Vec<Option<f64>>], col: usize) -> Option<u64> {
    let rel = relative(times);
    let ran: Vec<usize> = (0..sizes.len().min(rel.len()))
        .filter(|&i| rel[i].get(col).copied().flatten().is_some())
        .collect();
    if ran.is_empty() {
        return None;
    }
    let wins = |i: usize| rel[i][col].is_some_and(|r| r <= 1.0 + 1e-12);
    let from = ran
        .iter()
        .rposition(|&i| !wins(i))
        .map_or(0, |last_loss| last_loss + 1);
    Some(ran.get(from).map_or(0, |&i| sizes[i]))
}

/// The rooted collectives' (broadcast / reduce) small and mid sizes from one sweep:
/// the LL16 kernel up to a cap `a`, the LL63 chain above it up to `b`, the other
/// kernels' own assignment ([`assign`] over `kernels`, column indices of `times`)
/// above that. `times` holds every candidate but the copy engines; `ll16` / `ll63` are
/// those columns (`None`: not in the sweep). Returns, for every cap the sweep allows —
/// 0 and each size up to `cap` where LL16 ran, or just `cap` (the sizes up to it keep
/// the file's kernel, costing nothing) without an LL16 column — the least summed
/// `time / best time` over the sizes and the LL63 window's end that gives it (`Some(0)`:
/// no window; `None`: no LL63 column; ties: the smaller window). The window ends below
/// `ce_min` when that is not 0: the copy engines take those sizes (outside graph
/// captures), and the window sizes the LL63 scratch region.
pub fn rooted_windows(
    sizes: &[u64],
    times: &[Vec<Option<f64>>],
    ll16: Option<usize>,
    ll63: Option<usize>,
    kernels: std::ops::Range<usize>,
    cap: u64,
    ce_min: u64,
) -> Vec<(u64, f64, Option<u64>)> {
    let rows: Vec<usize> = (0..sizes.len().min(times.len()))
        .filter(|&i| times[i].iter().any(Option::is_some))
        .collect();
    let rel = relative(times);
    let cell = |i: usize, c: usize| rel[i].get(c).copied().flatten();
    let others = assign(&columns(times, kernels.clone()));
    // what a size costs on the others' assignment (nothing ran there: no preference)
    let rest =
        |i: usize| others[i].map_or(0.0, |c| cell(i, kernels.start + c).unwrap_or(f64::INFINITY));
    // what a size costs on LL16 (no column: the file's kernel, no preference)
    let small = |i: usize| ll16.map_or(0.0, |c| cell(i, c).unwrap_or(f64::INFINITY));
    let caps: Vec<u64> = match ll16 {
        Some(c) => std::iter::once(0)
            .chain(
                rows.iter()
                    .filter(|&&i| sizes[i] <= cap && cell(i, c).is_some())
                    .map(|&i| sizes[i]),
            )
            .collect(),
        None => vec![cap],
    };
    let mut out = Vec::new();
    for a in caps {
        let ends: Vec<u64> = match ll63 {
            Some(_) => std::iter::once(a)
                .chain(
                    rows.iter()
                        .map(|&i| sizes[i])
                        .filter(|&s| s > a && (ce_min == 0 || s < ce_min)),
                )
                .collect(),
            None => vec![a],
        };
        let mut best = (f64::INFINITY, a);
        for b in ends {
            let total: f64 = rows
                .iter()
                .map(|&i| match sizes[i] {
                    s if s <= a => small(i),
                    s if s <= b => ll63.and_then(|c| cell(i, c)).unwrap_or(f64::INFINITY),
                    _ => rest(i),
                })
                .sum();
            if total < best.0 - 1e-9 {
                best = (total, b);
            }
        }
        let window = ll63.map(|_| if best.1 > a { best.1 } else { 0 });
        out.push((a, best.0, window));
    }
    out
}

/// Largest size assigned candidate `c`: `Some(0)` when `c` ran somewhere but was
/// never chosen, `None` when it never ran (nothing to derive).
pub fn last_size_of(
    sizes: &[u64],
    times: &[Vec<Option<f64>>],
    choice: &[Option<usize>],
    c: usize,
) -> Option<u64> {
    chosen_sizes(sizes, times, choice, c).map(|s| s.max().unwrap_or(0))
}

/// Smallest size assigned candidate `c`: `Some(0)` ("never") when it ran but was
/// never chosen, `None` when it never ran.
pub fn first_size_of(
    sizes: &[u64],
    times: &[Vec<Option<f64>>],
    choice: &[Option<usize>],
    c: usize,
) -> Option<u64> {
    chosen_sizes(sizes, times, choice, c).map(|s| s.min().unwrap_or(0))
}

/// The window of column `col`: the smallest and largest size where it was the fastest
/// of all columns (both 0 when it ran but never was; `None` when it never ran).
fn window(sizes: &[u64], times: &[Vec<Option<f64>>], col: usize) -> Option<(u64, u64)> {
    if !times
        .iter()
        .any(|r| r.get(col).copied().flatten().is_some())
    {
        return None;
    }
    let wins: Vec<u64> = sizes
        .iter()
        .zip(&relative(times))
        .filter(|(_, r)| r.get(col).copied().flatten() == Some(1.0))
        .map(|(s, _)| *s)
        .collect();
    Some((
        wins.first().copied().unwrap_or(0),
        wins.last().copied().unwrap_or(0),
    ))
}

/// Thresholds the tuner derived (file meaning; `None`: not measured, keep the old one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Derived {
    /// `allreduce_ll_max`.
    pub allreduce_ll_max: Option<u64>,
    /// `allreduce_push_min` (0: never).
    pub allreduce_push_min: Option<u64>,
    /// `allgather_reducescatter_ll_chunk_max`.
    pub ll_chunk_max: Option<u64>,
    /// `broadcast_sf_min` (0: never).
    pub broadcast_sf_min: Option<u64>,
    /// `allreduce_ring_min` (0: never).
    pub allreduce_ring_min: Option<u64>,
    /// `allgather_ring_min` (0: never).
    pub allgather_ring_min: Option<u64>,
    /// `reducescatter_ring_min` (0: never).
    pub reducescatter_ring_min: Option<u64>,
    /// `broadcast_chain_min` (0: never).
    pub broadcast_chain_min: Option<u64>,
    /// `reduce_chain_min` (0: never).
    pub reduce_chain_min: Option<u64>,
    /// `reducescatter_push_min` (0: never).
    pub reducescatter_push_min: Option<u64>,
    /// `reducescatter_push_max`.
    pub reducescatter_push_max: Option<u64>,
    /// `reduce_all_max` (0: never).
    pub reduce_all_max: Option<u64>,
    /// `broadcast_ll63_max` (0: never).
    pub broadcast_ll63_max: Option<u64>,
    /// `reduce_ll63_max` (0: never).
    pub reduce_ll63_max: Option<u64>,
    /// `broadcast_ce_min` (0: never).
    pub broadcast_ce_min: Option<u64>,
    /// `sendrecv_ce_min` (0: never).
    pub sendrecv_ce_min: Option<u64>,
    /// `reduce_ce_min` (0: never).
    pub reduce_ce_min: Option<u64>,
    /// `allreduce_ce_min` (0: never).
    pub allreduce_ce_min: Option<u64>,
    /// `broadcast_reduce_ll_max` (0: never LL16).
    pub broadcast_reduce_ll_max: Option<u64>,
    /// `allgather_ll63_min`.
    pub allgather_ll63_min: Option<u64>,
    /// `allgather_ll63_max` (0: never).
    pub allgather_ll63_max: Option<u64>,
    /// `reducescatter_ll63_min`.
    pub reducescatter_ll63_min: Option<u64>,
    /// `reducescatter_ll63_max` (0: never).
    pub reducescatter_ll63_max: Option<u64>,
}

impl Derived {
    /// All-reduce: candidates `[ll, two-shot, push, ring]` over total bytes (a sweep
    /// without the ring column leaves `allreduce_ring_min` unmeasured).
    pub fn allreduce(&mut self, sizes: &[u64], times: &[Vec<Option<f64>>]) {
        let ch = assign(times);
        self.allreduce_ll_max = last_size_of(sizes, times, &ch, 0);
        self.allreduce_push_min = first_size_of(sizes, times, &ch, 2);
        self.allreduce_ring_min = first_size_of(sizes, times, &ch, 3);
    }

    /// The ring threshold of an all-gather (`gather`) or reduce-scatter sweep:
    /// candidates `[ll, direct, ring]` over total bytes, assigned on their own (the LL
    /// threshold the two share comes from [`Derived::gather_scatter`]). A
    /// reduce-scatter sweep has a fourth column, `push`, which is a window, not a step
    /// (push beats the pull kernel at mid sizes only, and the selector runs it between
    /// `reducescatter_push_min` and `_max` whatever the others say): the window spans
    /// the sizes where push was the fastest of all columns (both 0: never).
    pub fn gather_scatter_ring(&mut self, gather: bool, sizes: &[u64], times: &[Vec<Option<f64>>]) {
        let three = first_columns(times, 3);
        let ch = assign(&three);
        let v = first_size_of(sizes, &three, &ch, 2);
        if gather {
            self.allgather_ring_min = v;
            return;
        }
        self.reducescatter_ring_min = v;
        if let Some((min, max)) = window(sizes, times, 3) {
            self.reducescatter_push_min = Some(min);
            self.reducescatter_push_max = Some(max);
        }
    }

    /// The LL63 all-gather's (`gather`) or reduce-scatter's window from that
    /// collective's sweep whose column `col` is the LL63 kernel (over the output or the
    /// input): a window, not a step (the selector asks it before the LL16 kernel),
    /// spanning the sizes where LL63 was the fastest of all columns (both 0: never; no
    /// LL63 time at all: not measured).
    pub fn gather_scatter_ll63(
        &mut self,
        gather: bool,
        sizes: &[u64],
        times: &[Vec<Option<f64>>],
        col: usize,
    ) {
        if let Some((min, max)) = window(sizes, times, col) {
            let (lo, hi) = if gather {
                (&mut self.allgather_ll63_min, &mut self.allgather_ll63_max)
            } else {
                (
                    &mut self.reducescatter_ll63_min,
                    &mut self.reducescatter_ll63_max,
                )
            };
            (*lo, *hi) = (Some(min), Some(max));
        }
    }

    /// Reduce: candidates `[all, worker, chain]` over bytes (3 or more ranks;
    /// `[worker, chain]` with 2, where the root always works).
    pub fn reduce(&mut self, sizes: &[u64], times: &[Vec<Option<f64>>]) {
        let ch = assign(times);
        let cols = times.iter().map(Vec::len).max().unwrap_or(0);
        if cols >= 3 {
            self.reduce_all_max = last_size_of(sizes, times, &ch, 0);
            self.reduce_chain_min = first_size_of(sizes, times, &ch, 2);
        } else {
            self.reduce_chain_min = first_size_of(sizes, times, &ch, 1);
        }
    }

    /// All-gather and reduce-scatter share one threshold: candidates `[ll, direct]`
    /// (the first two columns; a ring column is [`Derived::gather_scatter_ring`]'s)
    /// over per-rank chunk bytes, cost = the sum of both collectives' relative times
    /// (either alone when only one was measured).
    pub fn gather_scatter(
        &mut self,
        chunks: &[u64],
        allgather: Option<&[Vec<Option<f64>>]>,
        reducescatter: Option<&[Vec<Option<f64>>]>,
    ) {
        let two = |t| first_columns(t, 2);
        let (a, b) = (allgather.map(two), reducescatter.map(two));
        let (costs, times) = match (&a, &b) {
            (Some(a), Some(b)) => (add_costs(&relative(a), &relative(b)), a),
            (Some(a), None) | (None, Some(a)) => (relative(a), a),
            (None, None) => return,
        };
        let ch = assign_costs(&costs);
        self.ll_chunk_max = last_size_of(chunks, times, &ch, 0);
    }

    /// Broadcast: candidates `[direct, scatter-forward, chain]` over bytes.
    pub fn broadcast(&mut self, sizes: &[u64], times: &[Vec<Option<f64>>]) {
        let ch = assign(times);
        self.broadcast_sf_min = first_size_of(sizes, times, &ch, 1);
        self.broadcast_chain_min = first_size_of(sizes, times, &ch, 2);
    }

    /// `base` with the derived thresholds and the tuner's metadata.
    pub fn apply(&self, base: &Section, meta: &Meta) -> Section {
        let mut s = base.clone();
        let mut kept = Vec::new();
        let mut set = |v: Option<u64>, field: &mut u64, name: &str| match v {
            Some(x) => *field = x,
            None => kept.push(name.to_string()),
        };
        set(
            self.allreduce_ll_max,
            &mut s.allreduce_ll_max,
            "allreduce_ll_max",
        );
        set(
            self.allreduce_push_min,
            &mut s.allreduce_push_min,
            "allreduce_push_min",
        );
        set(
            self.ll_chunk_max,
            &mut s.allgather_reducescatter_ll_chunk_max,
            "allgather_reducescatter_ll_chunk_max",
        );
        set(
            self.broadcast_sf_min,
            &mut s.broadcast_sf_min,
            "broadcast_sf_min",
        );
        // the optional keys: a measured value replaces the file's, else it is kept
        for (v, field, name) in [
            (
                self.allreduce_ring_min,
                &mut s.allreduce_ring_min,
                "allreduce_ring_min",
            ),
            (
                self.allgather_ring_min,
                &mut s.allgather_ring_min,
                "allgather_ring_min",
            ),
            (
                self.reducescatter_ring_min,
                &mut s.reducescatter_ring_min,
                "reducescatter_ring_min",
            ),
            (
                self.broadcast_chain_min,
                &mut s.broadcast_chain_min,
                "broadcast_chain_min",
            ),
            (
                self.reduce_chain_min,
                &mut s.reduce_chain_min,
                "reduce_chain_min",
            ),
            (
                self.reducescatter_push_min,
                &mut s.reducescatter_push_min,
                "reducescatter_push_min",
            ),
            (
                self.reducescatter_push_max,
                &mut s.reducescatter_push_max,
                "reducescatter_push_max",
            ),
            (self.reduce_all_max, &mut s.reduce_all_max, "reduce_all_max"),
            (
                self.broadcast_ll63_max,
                &mut s.broadcast_ll63_max,
                "broadcast_ll63_max",
            ),
            (
                self.reduce_ll63_max,
                &mut s.reduce_ll63_max,
                "reduce_ll63_max",
            ),
            (
                self.broadcast_ce_min,
                &mut s.broadcast_ce_min,
                "broadcast_ce_min",
            ),
            (
                self.sendrecv_ce_min,
                &mut s.sendrecv_ce_min,
                "sendrecv_ce_min",
            ),
            (self.reduce_ce_min, &mut s.reduce_ce_min, "reduce_ce_min"),
            (
                self.allreduce_ce_min,
                &mut s.allreduce_ce_min,
                "allreduce_ce_min",
            ),
            (
                self.broadcast_reduce_ll_max,
                &mut s.broadcast_reduce_ll_max,
                "broadcast_reduce_ll_max",
            ),
            (
                self.allgather_ll63_min,
                &mut s.allgather_ll63_min,
                "allgather_ll63_min",
            ),
            (
                self.allgather_ll63_max,
                &mut s.allgather_ll63_max,
                "allgather_ll63_max",
            ),
            (
                self.reducescatter_ll63_min,
                &mut s.reducescatter_ll63_min,
                "reducescatter_ll63_min",
            ),
            (
                self.reducescatter_ll63_max,
                &mut s.reducescatter_ll63_max,
                "reducescatter_ll63_max",
            ),
        ] {
            match v {
                Some(x) => *field = Some(x),
                None if field.is_some() => kept.push(name.to_string()),
                None => {}
            }
        }
        s.tuned = true;
        s.gpu_name = meta.gpu_name.clone();
        s.date = meta.date.clone();
        s.command = meta.command.clone();
        let (remarks, kept): (Vec<String>, Vec<String>) =
            kept.into_iter().partition(|k| k.starts_with('('));
        let mut note = format!("tuner sweep {}", meta.sweep);
        if !kept.is_empty() {
            note += &format!("; not measured, kept: {}", kept.join(", "));
        }
        for r in remarks {
            note += &format!(" {r}");
        }
        // the kept keys' provenance is in the old note: carry it (the oldest part is cut
        // once the chain of runs grows past NOTE_MAX)
        if !kept.is_empty() && !base.note.is_empty() {
            note += &format!(" | earlier note (for the kept keys): {}", base.note);
        }
        s.note = cut_note(note);
        s
    }
}

/// Longest note the tuner writes (characters).
pub const NOTE_MAX: usize = 2000;

/// `note` cut to [`NOTE_MAX`] characters, ending in "…" when cut.
fn cut_note(note: String) -> String {
    if note.chars().count() <= NOTE_MAX {
        return note;
    }
    let mut cut: String = note.chars().take(NOTE_MAX - 1).collect();
    cut.push('…');
    cut
}

/// The file the tuner writes: `existing` (the `--out` file's text and name, when it
/// exists; it must name this GPU) or else the embedded file for `gpu` (a new file
/// naming only `gpu` when none does), with `[ranks.n]` replaced by `derived` applied
/// to its current (or nearest) section. Other sections are kept as they are.
pub fn merged(
    existing: Option<(&str, &str)>,
    gpu: &str,
    n: u32,
    derived: &Derived,
    meta: &Meta,
) -> Result<TuningFile> {
    if gpu.trim().is_empty() {
        return Err(CollError::invalid(
            "the driver gave no GPU name: cannot say which GPUs the tuning applies to",
        ));
    }
    if !(1..=layout::MAX_RANKS as u32).contains(&n) {
        return Err(CollError::invalid(format!(
            "{n} ranks: a tuning section covers 1..={} ranks",
            layout::MAX_RANKS
        )));
    }
    let mut file = match existing {
        Some((text, origin)) => {
            let f = TuningFile::parse(text, origin)?;
            if f.matches(gpu).is_none() {
                return Err(CollError::invalid(format!(
                    "{origin} is for GPUs {:?}, this GPU is `{gpu}`: write to another --out (a new file for this GPU), or add a prefix of its name to `gpu` there",
                    f.gpu
                )));
            }
            f
        }
        None => {
            let (_, f, matched) = embedded_for(gpu)?;
            if matched {
                f
            } else {
                let base = f.section(n).1.clone();
                TuningFile {
                    gpu: vec![gpu.trim().to_string()],
                    ranks: [(n, base)].into(),
                }
            }
        }
    };
    let base = file.section(n).1.clone();
    file.ranks.insert(n, derived.apply(&base, meta));
    Ok(file)
}

/// What the tuner records about its run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// Driver device name.
    pub gpu_name: String,
    /// UTC date, YYYY-MM-DD.
    pub date: String,
    /// The exact command.
    pub command: String,
    /// Sizes and flags swept, e.g. `1K..256M x2, half, 20 iters`.
    pub sweep: String,
}

/// Today's UTC date as YYYY-MM-DD (no time-zone database needed).
pub fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    date_from_days((secs / 86_400) as i64)
}

/// Civil date of `days` since 1970-01-01 (H. Hinnant's algorithm).
pub fn date_from_days(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f64]) -> Vec<Option<f64>> {
        v.iter().map(|&x| (x > 0.0).then_some(x)).collect()
    }

    #[test]
    fn assignment_is_monotone_and_robust_to_one_noisy_size() {
        // LL wins to 128K, two-shot to 16M, push above; one noisy size at 32K.
        let sizes = [
            8u64 << 10,
            32 << 10,
            128 << 10,
            512 << 10,
            16 << 20,
            64 << 20,
        ];
        let times = vec![
            t(&[7.0, 9.0, 0.0]),
            t(&[8.5, 8.4, 0.0]), // noise: two-shot a hair faster
            t(&[10.0, 12.0, 0.0]),
            t(&[20.0, 14.0, 0.0]),
            t(&[0.0, 90.0, 95.0]),
            t(&[0.0, 330.0, 300.0]),
        ];
        let ch = assign(&times);
        assert_eq!(
            ch,
            vec![Some(0), Some(0), Some(0), Some(1), Some(1), Some(2)]
        );
        let mut d = Derived::default();
        d.allreduce(&sizes, &times);
        assert_eq!(d.allreduce_ll_max, Some(128 << 10));
        assert_eq!(d.allreduce_push_min, Some(64 << 20));
    }

    #[test]
    fn thresholds_when_a_kernel_never_wins_or_never_ran() {
        let sizes = [1024u64, 4096, 16384];
        // LL always slower, push never ran
        let times = vec![
            t(&[9.0, 8.0, 0.0]),
            t(&[9.5, 8.0, 0.0]),
            t(&[12.0, 9.0, 0.0]),
        ];
        let mut d = Derived::default();
        d.allreduce(&sizes, &times);
        assert_eq!(d.allreduce_ll_max, Some(0), "ran, never chosen: 0 = never");
        assert_eq!(d.allreduce_push_min, None, "never ran: keep the old value");
        // LL wins everywhere it ran: its largest size
        let times = vec![t(&[5.0, 8.0]), t(&[5.5, 8.0]), t(&[6.0, 9.0])];
        d.allreduce(&sizes, &times);
        assert_eq!(d.allreduce_ll_max, Some(16384));
        assert_eq!(d.allreduce_push_min, None);
        // push ran but never won: 0 = never
        let times = vec![t(&[0.0, 8.0, 9.0]), t(&[0.0, 9.0, 9.5])];
        d.allreduce(&sizes[..2], &times);
        assert_eq!((d.allreduce_ll_max, d.allreduce_push_min), (None, Some(0)));
        // nothing ran at a size: that size is skipped
        let ch = assign(&[t(&[1.0, 2.0]), vec![None, None], t(&[3.0, 1.0])]);
        assert_eq!(ch, vec![Some(0), None, Some(1)]);
        // ties go to the earlier candidate
        assert_eq!(
            assign(&[t(&[2.0, 2.0]), t(&[2.0, 2.0])]),
            vec![Some(0), Some(0)]
        );
        assert!(assign(&[]).is_empty());
    }

    #[test]
    fn allgather_ll63_window_spans_its_wins() {
        // [ll, direct, ring, ll63]: LL16 best at 64K, LL63 from 128K to 8M (not at 2M,
        // a tie lost to noise inside the window), the direct kernel at 32M, the ring
        // above where LL63 did not run
        let sizes = [
            64u64 << 10,
            128 << 10,
            2 << 20,
            8 << 20,
            32 << 20,
            128 << 20,
        ];
        let times = vec![
            t(&[3.0, 4.0, 0.0, 3.2]),
            t(&[3.6, 4.2, 0.0, 3.5]),
            t(&[0.0, 11.9, 0.0, 12.0]),
            t(&[0.0, 25.1, 26.0, 23.3]),
            t(&[0.0, 77.8, 80.0, 87.6]),
            t(&[0.0, 300.0, 280.0, 0.0]),
        ];
        let mut d = Derived::default();
        d.gather_scatter_ll63(true, &sizes, &times, 3);
        assert_eq!(
            (d.allgather_ll63_min, d.allgather_ll63_max),
            (Some(128 << 10), Some(8 << 20))
        );
        // ran, never fastest: never; never ran: not measured
        let mut d = Derived::default();
        d.gather_scatter_ll63(true, &sizes[..1], &times[..1], 3);
        assert_eq!(
            (d.allgather_ll63_min, d.allgather_ll63_max),
            (Some(0), Some(0))
        );
        let mut d = Derived::default();
        d.gather_scatter_ll63(true, &sizes[5..], &times[5..], 3);
        assert_eq!((d.allgather_ll63_min, d.allgather_ll63_max), (None, None));
    }

    #[test]
    fn reducescatter_ll63_window_spans_its_wins_and_reaches_the_file() {
        // [ll, direct, ring, push, ll63]: LL16 best at 256K, LL63 at 1M-16M, push at
        // 32M (LL63 slower there), the ring above where LL63 did not run
        let sizes = [
            256u64 << 10,
            1 << 20,
            4 << 20,
            16 << 20,
            32 << 20,
            128 << 20,
        ];
        let times = vec![
            t(&[4.1, 5.0, 0.0, 0.0, 4.8]),
            t(&[6.6, 7.0, 0.0, 6.9, 6.2]),
            t(&[0.0, 16.0, 0.0, 15.9, 10.8]),
            t(&[0.0, 36.0, 40.0, 34.6, 30.5]),
            t(&[0.0, 70.0, 75.0, 60.0, 64.0]),
            t(&[0.0, 300.0, 280.0, 290.0, 0.0]),
        ];
        let mut d = Derived::default();
        d.gather_scatter_ll63(false, &sizes, &times, 4);
        assert_eq!(
            (d.reducescatter_ll63_min, d.reducescatter_ll63_max),
            (Some(1 << 20), Some(16 << 20))
        );
        assert_eq!((d.allgather_ll63_min, d.allgather_ll63_max), (None, None));
        let f = TuningFile::parse(EMBEDDED[0].1, "e").unwrap();
        let s = d.apply(f.section(4).1, &Meta::default());
        assert_eq!(
            (s.reducescatter_ll63_min, s.reducescatter_ll63_max),
            (Some(1 << 20), Some(16 << 20))
        );
    }

    #[test]
    fn gather_scatter_share_one_threshold_and_broadcast_switches_once() {
        let chunks = [1024u64, 16 << 10, 64 << 10, 256 << 10];
        // all-gather would switch after 64K, reduce-scatter after 16K: the sum decides
        let ag = vec![
            t(&[5.0, 8.0]),
            t(&[6.0, 8.0]),
            t(&[7.0, 9.0]),
            t(&[20.0, 12.0]),
        ];
        let rs = vec![
            t(&[5.0, 8.0]),
            t(&[6.0, 8.0]),
            t(&[9.5, 9.0]),
            t(&[22.0, 13.0]),
        ];
        let mut d = Derived::default();
        d.gather_scatter(&chunks, Some(&ag), Some(&rs));
        assert_eq!(d.ll_chunk_max, Some(64 << 10));
        d.gather_scatter(&chunks, None, Some(&rs));
        assert_eq!(d.ll_chunk_max, Some(16 << 10));
        let sizes = [64u64 << 10, 1 << 20, 16 << 20];
        let bc = vec![t(&[10.0, 14.0]), t(&[30.0, 25.0]), t(&[300.0, 200.0])];
        d.broadcast(&sizes, &bc);
        assert_eq!(d.broadcast_sf_min, Some(1 << 20));
        let bc = vec![t(&[10.0, 14.0]), t(&[30.0, 35.0])];
        d.broadcast(&sizes[..2], &bc);
        assert_eq!(d.broadcast_sf_min, Some(0), "never won: 0 = never");
    }

    #[test]
    fn applying_derived_thresholds_records_the_run() {
        let f = TuningFile::parse(EMBEDDED[0].1, "e").unwrap();
        // a short provenance of its own: the embedded file's notes grow with every
        // hand-set key, and this test is about how a run's note is made
        let mut base = f.section(4).1.clone();
        base.note = "tuner sweep 1K..1G x2 (an earlier run)".into();
        let base = &base;
        let d = Derived {
            allreduce_ll_max: Some(196608),
            allreduce_push_min: Some(0),
            ll_chunk_max: Some(32768),
            broadcast_sf_min: None,
            allreduce_ring_min: Some(1 << 30),
            ..Derived::default()
        };
        let meta = Meta {
            gpu_name: "NVIDIA H200".into(),
            date: "2026-12-01".into(),
            command: "commhal tune --backend cuda-nvlink --ranks 4 --out \"a b.toml\"".into(),
            sweep: "1K..256M x2".into(),
        };
        let s = d.apply(base, &meta);
        assert!(s.tuned);
        assert_eq!(s.allreduce_ll_max, 196608);
        assert_eq!(s.allreduce_push_min, 0);
        assert_eq!(s.allgather_reducescatter_ll_chunk_max, 32768);
        assert_eq!(s.broadcast_sf_min, base.broadcast_sf_min, "kept");
        assert!(s.note.contains("kept: broadcast_sf_min"), "{}", s.note);
        // the kept keys' provenance travels along, and a chain of runs stays bounded
        assert!(!base.note.is_empty());
        assert!(s.note.ends_with(&base.note), "{}", s.note);
        let mut chained = s.clone();
        for _ in 0..20 {
            chained = d.apply(&chained, &meta);
        }
        assert_eq!(chained.note.chars().count(), NOTE_MAX, "{}", chained.note);
        assert!(chained.note.ends_with('…'));
        assert!(
            chained
                .note
                .starts_with(&format!("tuner sweep {}", meta.sweep))
        );
        // optional keys: measured -> replaced; not measured -> the file's value, named
        // as kept when it had one
        assert_eq!(s.allreduce_ring_min, Some(1 << 30));
        assert_eq!(s.reduce_chain_min, base.reduce_chain_min);
        assert!(
            s.note.contains("reduce_chain_min") == base.reduce_chain_min.is_some(),
            "{}",
            s.note
        );
        assert!(!s.note.contains("capped"), "{}", s.note);
        let big = Derived {
            ll_chunk_max: Some(1 << 20),
            ..d
        };
        let s2 = big.apply(base, &meta);
        assert_eq!(s2.allgather_reducescatter_ll_chunk_max, 1 << 20);
        assert!(!s2.note.contains("capped"), "{}", s2.note);
        let mut g = f.clone();
        g.ranks.insert(4, s.clone());
        g.ranks.insert(
            3,
            Section {
                note: "hand values".into(),
                ..FALLBACK.clone()
            },
        );
        let text = g.render().unwrap();
        assert!(
            text.contains(
                "#   [ranks.4] tuned on NVIDIA H200 (4 ranks), 2026-12-01, by: commhal tune"
            ),
            "{text}"
        );
        assert!(
            text.contains("#   [ranks.3] not tuned: hand values"),
            "{text}"
        );
        let back = TuningFile::parse(&text, "r").unwrap();
        assert_eq!(back.ranks[&4], s, "quotes in the command survive");
        assert_eq!(back.ranks[&2], f.ranks[&2]);
    }

    #[test]
    fn merging_keeps_other_sections_and_checks_the_gpu() {
        let d = Derived {
            allreduce_ll_max: Some(65536),
            ..Derived::default()
        };
        let meta = Meta {
            gpu_name: "NVIDIA H200".into(),
            date: "2026-12-01".into(),
            command: "commhal tune --backend cuda-nvlink --ranks 2 --out x.toml".into(),
            sweep: "1K..256M x2".into(),
        };
        // no --out file yet: the embedded file, one section replaced
        let f = merged(None, "NVIDIA H200", 2, &d, &meta).unwrap();
        let e = TuningFile::parse(EMBEDDED[0].1, "e").unwrap();
        assert_eq!(f.gpu, e.gpu);
        assert!(f.ranks[&2].tuned && f.ranks[&2].allreduce_ll_max == 65536);
        assert_eq!(f.ranks[&4], e.ranks[&4]);
        assert_eq!(f.ranks[&8], e.ranks[&8]);
        // a second run for 4 ranks on top of the first run's file keeps [ranks.2]
        let text = f.render().unwrap();
        let g = merged(Some((&text, "x.toml")), "NVIDIA H200", 4, &d, &meta).unwrap();
        assert_eq!(g.ranks[&2], f.ranks[&2]);
        assert!(g.ranks[&4].tuned);
        // a rank count without a section gets one, seeded from the nearest
        let h = merged(Some((&text, "x.toml")), "NVIDIA H200", 3, &d, &meta).unwrap();
        assert_eq!(h.ranks.len(), 4);
        assert_eq!(
            h.ranks[&3].allgather_reducescatter_ll_chunk_max,
            e.ranks[&4].allgather_reducescatter_ll_chunk_max
        );
        // another GPU's file is refused; an unknown GPU without a file gets a new one
        let err = merged(Some((&text, "x.toml")), "NVIDIA A100", 2, &d, &meta)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("x.toml is for GPUs") && err.contains("another --out"),
            "{err}"
        );
        let k = merged(None, "NVIDIA A100-SXM4-80GB", 2, &d, &meta).unwrap();
        assert_eq!(k.gpu, vec!["NVIDIA A100-SXM4-80GB".to_string()]);
        assert_eq!(k.ranks.keys().copied().collect::<Vec<_>>(), vec![2]);
        assert!(TuningFile::parse(&k.render().unwrap(), "k").is_ok());
        assert!(merged(None, " ", 2, &d, &meta).is_err());
        assert!(merged(None, "NVIDIA H200", 9, &d, &meta).is_err());
    }

    #[test]
    fn civil_dates() {
        assert_eq!(date_from_days(0), "1970-01-01");
        assert_eq!(date_from_days(19_723), "2024-01-01");
        assert_eq!(date_from_days(20_513), "2026-03-01");
        assert_eq!(date_from_days(11_016), "2000-02-29");
        assert_eq!(today_utc().len(), 10);
    }
}
