//! Results: per rank ([`RankOutput`]), merged over ranks and expectations ([`Report`]),
//! printed as a table with the closing line `N passed, N failed, N skipped`, or as JSON.
//!
//! Counting: *passed* = pass; *failed* = fail + unexpected-pass (an expected failure
//! that passed needs its expectation removed); *skipped* = not-supported +
//! known-failure. Never is a not-supported case counted as passed.

use serde::{Deserialize, Serialize};

use crate::expect::Expectations;

/// What one rank saw for one case.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum RankOutcome {
    /// The property held (optional note, e.g. a latency).
    Pass {
        /// Note.
        note: Option<String>,
    },
    /// The property was violated or an operation failed.
    Fail {
        /// What went wrong.
        message: String,
    },
    /// The case cannot run here.
    NotSupported {
        /// Why.
        reason: String,
    },
}

/// One rank's result for one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankResult {
    /// Case id.
    pub id: String,
    /// `docs/conformance.md` number.
    pub number: u32,
    /// One-line property.
    pub property: String,
    /// Outcome.
    pub outcome: RankOutcome,
    /// Wall time on this rank.
    pub millis: f64,
}

/// Everything one rank reports.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RankOutput {
    /// The rank.
    pub rank: u32,
    /// Set when the rank could not start (backend, bootstrap) or had to stop early.
    pub error: Option<String>,
    /// Per case, in run order.
    pub results: Vec<RankResult>,
}

/// Final status of a case.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Passed on every rank.
    Pass,
    /// Failed on some rank.
    Fail,
    /// Not supported (unclaimed guarantee, too few ranks, ...).
    NotSupported,
    /// Failed, as the expectations file says it does.
    KnownFailure,
    /// Listed as a known failure, but passed.
    UnexpectedPass,
}

impl Status {
    /// Table label.
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::NotSupported => "not-supported",
            Status::KnownFailure => "known-failure",
            Status::UnexpectedPass => "UNEXPECTED-PASS",
        }
    }
}

/// One case's merged result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseReport {
    /// `<backend>/<channel>/<case>[/<params>]`.
    pub id: String,
    /// `docs/conformance.md` number.
    pub number: u32,
    /// The property asserted.
    pub property: String,
    /// Status.
    pub status: Status,
    /// Failure message, not-supported reason, known-failure reason, or pass note.
    pub detail: String,
    /// Slowest rank's time.
    pub millis: f64,
}

/// The suite's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Backend.
    pub backend: String,
    /// Ranks.
    pub ranks: u32,
    /// Quick tier?
    pub quick: bool,
    /// `processes` or `threads`.
    pub mode: String,
    /// Problems outside any case (a rank that did not start, the watchdog).
    pub errors: Vec<String>,
    /// Cases, in run order.
    pub cases: Vec<CaseReport>,
    /// Passed count.
    pub passed: usize,
    /// Failed count (fail + unexpected-pass + one per error).
    pub failed: usize,
    /// Skipped count (not-supported + known-failure).
    pub skipped: usize,
    /// Wall time of the whole run.
    pub wall_ms: f64,
}

impl Report {
    /// Merge per-rank outputs (any rank failing fails the case; a rank with no result
    /// for a case fails it) and apply expectations.
    pub fn merge(
        header: (String, u32, bool, String),
        outputs: &[RankOutput],
        expectations: &Expectations,
        mut errors: Vec<String>,
        wall_ms: f64,
    ) -> Report {
        let (backend, ranks, quick, mode) = header;
        for o in outputs {
            if let Some(e) = &o.error {
                errors.push(format!("rank {}: {e}", o.rank));
            }
        }
        // Case order: the longest result list (every rank runs the same list).
        let order: Vec<&RankResult> = outputs
            .iter()
            .max_by_key(|o| o.results.len())
            .map(|o| o.results.iter().collect())
            .unwrap_or_default();
        let mut cases = Vec::new();
        for first in order {
            let mut fails = Vec::new();
            let mut unsupported = None;
            let mut note = None;
            let mut millis: f64 = 0.0;
            for r in 0..ranks {
                let got = outputs
                    .iter()
                    .find(|o| o.rank == r)
                    .and_then(|o| o.results.iter().find(|x| x.id == first.id));
                match got {
                    None => fails.push(format!("rank {r} reported no result")),
                    Some(x) => {
                        millis = millis.max(x.millis);
                        match &x.outcome {
                            RankOutcome::Pass { note: n } => {
                                if note.is_none() {
                                    note = n.clone();
                                }
                            }
                            RankOutcome::Fail { message } => {
                                fails.push(format!("rank {r}: {message}"))
                            }
                            RankOutcome::NotSupported { reason } => {
                                unsupported.get_or_insert_with(|| reason.clone());
                            }
                        }
                    }
                }
            }
            let (mut status, mut detail) = if !fails.is_empty() {
                (Status::Fail, fails.join("; "))
            } else if let Some(reason) = unsupported {
                (Status::NotSupported, reason)
            } else {
                (Status::Pass, note.unwrap_or_default())
            };
            if let Some(reason) = expectations.lookup(&first.id) {
                match status {
                    Status::Fail => {
                        detail = format!("known failure ({reason}): {detail}");
                        status = Status::KnownFailure;
                    }
                    Status::Pass => {
                        detail = format!(
                            "listed as a known failure ({reason}) but passed: remove it from the expectations file"
                        );
                        status = Status::UnexpectedPass;
                    }
                    _ => {}
                }
            }
            cases.push(CaseReport {
                id: first.id.clone(),
                number: first.number,
                property: first.property.clone(),
                status,
                detail,
                millis,
            });
        }
        let count = |s: &[Status]| cases.iter().filter(|c| s.contains(&c.status)).count();
        let passed = count(&[Status::Pass]);
        let failed = count(&[Status::Fail, Status::UnexpectedPass]) + errors.len();
        let skipped = count(&[Status::NotSupported, Status::KnownFailure]);
        Report {
            backend,
            ranks,
            quick,
            mode,
            errors,
            cases,
            passed,
            failed,
            skipped,
            wall_ms,
        }
    }

    /// `N passed, N failed, N skipped`.
    pub fn summary_line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }

    /// The case called `id`.
    pub fn get(&self, id: &str) -> Option<&CaseReport> {
        self.cases.iter().find(|c| c.id == id)
    }

    /// Process exit code: 0 when nothing failed.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.failed > 0)
    }

    /// The human table, then the closing line.
    pub fn table(&self) -> String {
        let w = self
            .cases
            .iter()
            .map(|c| c.id.len())
            .max()
            .unwrap_or(10)
            .max(10);
        let mut s = format!(
            "conformance: backend {}, {} ranks ({}), {} tier\n",
            self.backend,
            self.ranks,
            self.mode,
            if self.quick { "quick" } else { "full" }
        );
        s.push_str(&format!(
            "{:<w$}  {:<15} {:>10}  detail\n",
            "case", "status", "time"
        ));
        for c in &self.cases {
            s.push_str(&format!(
                "{:<w$}  {:<15} {:>8.1}ms  {}\n",
                c.id,
                c.status.label(),
                c.millis,
                c.detail
            ));
        }
        for e in &self.errors {
            s.push_str(&format!("error: {e}\n"));
        }
        s.push_str(&self.summary_line());
        s.push('\n');
        s
    }

    /// Machine output.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(id: &str, outcome: RankOutcome) -> RankResult {
        RankResult {
            id: id.into(),
            number: 1,
            property: "p".into(),
            outcome,
            millis: 1.0,
        }
    }

    #[test]
    fn merge_counts_and_expectations() {
        let pass = RankOutcome::Pass { note: None };
        let fail = RankOutcome::Fail {
            message: "bad".into(),
        };
        let ns = RankOutcome::NotSupported {
            reason: "no".into(),
        };
        let outs = vec![
            RankOutput {
                rank: 0,
                error: None,
                results: vec![
                    res("b/a", pass.clone()),
                    res("b/b", fail.clone()),
                    res("b/c", ns.clone()),
                    res("b/d", fail.clone()),
                    res("b/e", pass.clone()),
                ],
            },
            RankOutput {
                rank: 1,
                error: None,
                results: vec![
                    res("b/a", pass.clone()),
                    res("b/b", pass.clone()),
                    res("b/c", ns.clone()),
                    res("b/d", pass.clone()),
                ],
            },
        ];
        let exp = Expectations::parse(
            "[[known-failure]]\nid=\"b/d\"\nreason=\"r\"\n[[known-failure]]\nid=\"b/a\"\nreason=\"r\"\n",
        )
        .unwrap();
        let r = Report::merge(
            ("b".into(), 2, true, "threads".into()),
            &outs,
            &exp,
            vec![],
            0.0,
        );
        let st: Vec<_> = r.cases.iter().map(|c| c.status).collect();
        assert_eq!(
            st,
            vec![
                Status::UnexpectedPass,
                Status::Fail,
                Status::NotSupported,
                Status::KnownFailure,
                Status::Fail // rank 1 has no result for b/e
            ]
        );
        assert_eq!(r.summary_line(), "0 passed, 3 failed, 2 skipped");
        assert!(r.table().ends_with("0 passed, 3 failed, 2 skipped\n"));
        assert_eq!(r.exit_code(), 1);
    }
}
