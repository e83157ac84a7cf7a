//! Running a scenario to its summary, for the tests of the `examples/` files.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use slice_sim::Scenario;
use slice_sim::simulate::{SimulateOptions, Summary, simulate};

/// `scenario` simulated to the end (30 s to settle): its summary and the printed text.
pub async fn run_to_summary(scenario: Scenario) -> (Summary, String) {
    let out = Arc::new(Mutex::new(Vec::<u8>::new()));
    let options = SimulateOptions {
        scenario,
        serve: None,
        settle_timeout: Duration::from_secs(30),
        picture: None,
    };
    let summary = simulate(options, out.clone()).await.unwrap();
    let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
    (summary, text)
}
