//! One thread of its own runs every plan, in turn. Planning takes tens of milliseconds at
//! scale and is serialized by the planning lock anyway: on the async threads it would stall
//! watches, health checks and lease renewals; on the runtime's blocking pool each concurrent
//! reconcile would park a thread of its own (and, with glibc, an allocator arena) waiting
//! for the lock. Here it costs one thread whatever `--concurrency` is.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

pub struct PlannerThread {
    jobs: Mutex<mpsc::Sender<Job>>,
}

/// The planner thread is gone or the plan panicked: the reconcile fails and is retried.
#[derive(Debug, thiserror::Error)]
#[error("the planner thread {0}")]
pub struct PlanFailed(&'static str);

impl PlannerThread {
    /// Start the thread; it ends when this handle is dropped.
    pub fn start() -> PlannerThread {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("planner".into())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })
            .expect("the planner thread starts");
        PlannerThread {
            jobs: Mutex::new(jobs),
        }
    }

    /// Run `work` on the planner thread and wait for its result without blocking the caller's
    /// thread. A panic in `work` is caught: the thread goes on with the next job.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PlanFailed> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(catch_unwind(AssertUnwindSafe(work)));
        });
        self.jobs
            .lock()
            .expect("planner queue lock poisoned")
            .send(job)
            .map_err(|_| PlanFailed("has stopped"))?;
        match result.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_)) => Err(PlanFailed("panicked while planning")),
            Err(_) => Err(PlanFailed("has stopped")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn plans_run_in_turn_on_one_thread_and_a_panic_does_not_end_it() {
        let planner = PlannerThread::start();
        let first = planner
            .run(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert_eq!(first.as_deref(), Some("planner"));
        let err = planner.run(|| panic!("a bad plan")).await.unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
        let again = planner.run(|| std::thread::current().id()).await.unwrap();
        let same = planner.run(|| std::thread::current().id()).await.unwrap();
        assert_eq!(again, same, "one thread, still running");
    }
}
