//! The store contract checked against a reference model: proptest draws histories
//! (accepts and duplicates, claims, completions, leases that run out, time,
//! replays, discards, pauses, purges, across two sources, two ordered routes and
//! two keys), runs each on a fresh store and on the model in `reference`, and
//! compares what the store shows with what the model shows after every step
//! (`check` says what). A disagreement shrinks to a short history, printed one
//! step a line. One test per backend of
//! `support::backends` (`model::embedded`, `model::redis`, `model::postgres`);
//! `HOOKGATE_MODEL_CASES=N` runs N histories per store instead of 128.
//!
//! Planted bug (then removed): an embedded replay that left dead deliveries dead
//! (`CASE status WHEN 'dead' THEN 'dead' ELSE 'pending' END` in
//! `sqlite::delivery::replay`) failed at once and shrank to four steps: `accept s0
//! e0 [b] -> entry#0`, `claim s0/b limit 1 -> claim#0 entry#0`, `complete claim#0
//! (entry#0/b) dead (refused) -> true`, `replay entry#0 due in 0 ms -> Done`;
//! entry#0 differs: the store says `status: Dead`, the model `status: Pending`.

mod check;
mod ops;
mod reference;
mod stores;

use proptest::test_runner::{Config, TestError, TestRunner};

use crate::support::Backend;

/// Histories per store, unless `HOOKGATE_MODEL_CASES` says otherwise.
const CASES: u32 = 128;
/// The longest history drawn.
const STEPS: usize = 40;

fn cases() -> u32 {
    std::env::var("HOOKGATE_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES)
}

/// Run the histories on `backend`; a disagreement fails the test with the
/// shortest history found that still disagrees.
fn histories(backend: Backend) {
    // Among the heaviest tests: alone with the timed ones.
    let _alone = crate::support::TIMED_ALONE.blocking_lock();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = stores::Server::start(backend);
    let run = |history: &[ops::Op]| -> Result<(), String> {
        rt.block_on(async {
            let start = hookgate::clock::system_now_ms();
            let case = server.fresh(start).await;
            let (case, outcome) = check::Run::new(case, start).history(history).await;
            server.retire(case);
            outcome
        })
    };
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&ops::history(STEPS), |history| {
        run(&history).map_err(proptest::test_runner::TestCaseError::fail)
    });
    let failure = match result {
        Ok(()) => None,
        Err(TestError::Fail(report, history)) => Some(shorter(history, report.to_string(), &run)),
        Err(TestError::Abort(why)) => Some(format!("the model test stopped: {why}")),
    };
    rt.block_on(server.closed());
    if let Some(report) = failure {
        panic!("the {backend:?} store and the model disagree\n{report}");
    }
}

/// The report of a history shorter or plainer than `history` that still fails,
/// if there is one: each step left out in turn, and each step naming an earlier
/// entry or a later claim ([`ops::Op::plainer`]), for as long as one of them
/// fails. Proptest keeps a step when leaving it out would change what a later step
/// names (a step names an entry by its number), and it makes that later step
/// plainer only after.
fn shorter(
    mut history: Vec<ops::Op>,
    mut report: String,
    run: &dyn Fn(&[ops::Op]) -> Result<(), String>,
) -> String {
    loop {
        let mut candidates: Vec<Vec<ops::Op>> = Vec::new();
        for i in 0..history.len() {
            let mut fewer = history.clone();
            fewer.remove(i);
            candidates.push(fewer);
        }
        for (i, op) in history.iter().enumerate() {
            for plainer in op.plainer() {
                let mut other = history.clone();
                other[i] = plainer;
                candidates.push(other);
            }
        }
        let Some((fails, r)) = candidates
            .into_iter()
            .find_map(|c| run(&c).err().map(|r| (c, r)))
        else {
            return report;
        };
        history = fails;
        report = r;
    }
}

/// One test per backend, from the one list in `support::backends`.
#[macro_export]
macro_rules! model_tests {
    ([$($test:ident => $variant:ident),+ $(,)?]) => {
        $(
            #[test]
            fn $test() {
                histories(Backend::$variant);
            }
        )+
    };
}

crate::backends!(model_tests!());
