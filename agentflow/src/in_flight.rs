//! Shielding journaled effects from timeouts: a node timeout or the run's
//! deadline waits for an effect in flight to end before it stops the node.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Counts journaled effects in flight. A node timeout or the run's deadline
/// that falls while one runs waits for it to end (and be journaled) before
/// it stops the node: an effect that started is never cut off mid-call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shield(Arc<InFlight>);

#[derive(Debug, Default)]
struct InFlight {
    /// Effects running now.
    count: AtomicUsize,
    /// Notified when `count` falls to zero.
    idle: Notify,
}

impl Shield {
    pub(crate) fn enter(&self) -> Entered {
        self.0.count.fetch_add(1, Ordering::AcqRel);
        Entered(Arc::clone(&self.0))
    }

    /// Completes when no effect is in flight.
    async fn idle(&self) {
        loop {
            let notified = self.0.idle.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the count is read, so a fall to zero in between is not missed.
            notified.as_mut().enable();
            if self.0.count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

pub(crate) struct Entered(Arc<InFlight>);

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Held while a journaled effect runs; see [`Shield`].
pub(crate) struct ShieldGuard(#[allow(dead_code)] pub(crate) Vec<Entered>);

/// The time limit passed and no shielded effect was in flight.
#[derive(Debug)]
pub(crate) struct Elapsed;

/// Runs `work` until `deadline`. Past it, an effect in flight under `shield`
/// is let finish first (and `work` kept polling so it can); then `work` is
/// dropped, unless it finished meanwhile.
pub(crate) async fn shielded_timeout<F: Future>(
    deadline: tokio::time::Instant,
    shield: &Shield,
    work: F,
) -> Result<F::Output, Elapsed> {
    let mut work = std::pin::pin!(work);
    tokio::select! {
        out = &mut work => return Ok(out),
        () = tokio::time::sleep_until(deadline) => {}
    }
    tokio::select! {
        biased;
        () = shield.idle() => Err(Elapsed),
        out = &mut work => Ok(out),
    }
}

/// Runs `work` until `stop` completes. Then an effect in flight under `shield` is let finish
/// first (and `work` kept polling so it can), for at most `grace`: an effect that hangs past it
/// is dropped with `work`, and its journal shows it started and never ended, so a resume treats
/// its outcome as unknown. `Err` once `work` is dropped, unless it finished meanwhile.
pub(crate) async fn shielded_stop<F: Future + Unpin, P: Future<Output = ()>>(
    mut stop: std::pin::Pin<&mut P>,
    grace: std::time::Duration,
    shields: &[&Shield],
    mut work: F,
) -> Result<F::Output, Elapsed> {
    // Work that finishes at its first poll (most in-memory steps) never waits for the stop.
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut work).poll(cx))).await;
    if let std::task::Poll::Ready(out) = first {
        return Ok(out);
    }
    // Work that finishes as the stop comes is kept.
    tokio::select! {
        biased;
        out = &mut work => return Ok(out),
        () = &mut stop => {}
    }
    // Reached only after a stop: boxed, so the future of every step does not carry its timer.
    Box::pin(grace_period(&mut work, grace, shields)).await
}

/// Polls `work` until it finishes or every shield is idle, for at most `grace`.
async fn grace_period<F: Future + Unpin>(
    work: &mut F,
    grace: std::time::Duration,
    shields: &[&Shield],
) -> Result<F::Output, Elapsed> {
    let idle = async {
        for shield in shields {
            shield.idle().await;
        }
    };
    tokio::select! {
        biased;
        out = work => Ok(out),
        _ = tokio::time::timeout(grace, idle) => Err(Elapsed),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stop_drops_the_work_once_no_effect_is_in_flight_or_the_grace_ran_out() {
        let shield = Shield::default();
        let stop = std::pin::pin!(tokio::time::sleep(Duration::from_millis(10)));
        let out = shielded_stop(stop, Duration::from_secs(5), &[&shield], std::future::pending::<()>()).await;
        assert!(out.is_err(), "nothing in flight: dropped at the stop");

        let _hung = shield.enter();
        let began = tokio::time::Instant::now();
        let stop = std::pin::pin!(tokio::time::sleep(Duration::from_millis(10)));
        let out = shielded_stop(stop, Duration::from_secs(5), &[&shield], std::future::pending::<()>()).await;
        assert!(out.is_err());
        assert_eq!(
            began.elapsed(),
            Duration::from_millis(5010),
            "an effect that hangs holds the stop off for the grace"
        );

        let stop = std::pin::pin!(std::future::ready(()));
        let work = Box::pin(tokio::time::sleep(Duration::from_millis(20)));
        let out = shielded_stop(stop, Duration::from_secs(5), &[&shield], work).await;
        assert!(out.is_ok(), "work that finishes while an effect holds the stop off is kept");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_with_no_effect_in_flight_stops_the_work() {
        let shield = Shield::default();
        let at = tokio::time::Instant::now() + Duration::from_millis(10);
        let out = shielded_timeout(at, &shield, std::future::pending::<()>()).await;
        assert!(out.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_waits_for_the_effects_in_flight_and_the_work_may_finish_meanwhile() {
        let shield = Shield::default();
        let (first, second) = (shield.enter(), shield.enter());
        let at = tokio::time::Instant::now() + Duration::from_millis(10);
        // The work ends 50 ms after the deadline, the effects 20 ms and 40 ms after it.
        let work = tokio::time::sleep(Duration::from_millis(60));
        let release = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            drop(first);
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(second);
            std::future::pending::<()>().await;
        };
        let began = tokio::time::Instant::now();
        let out = tokio::select! {
            out = shielded_timeout(at, &shield, work) => out,
            () = release => unreachable!("never completes"),
        };
        assert!(out.is_err(), "the work had not finished when the last effect ended");
        assert_eq!(began.elapsed(), Duration::from_millis(50), "stopped when the last effect ended, not before");

        let guard = shield.enter();
        let at = tokio::time::Instant::now() + Duration::from_millis(10);
        let work = tokio::time::sleep(Duration::from_millis(20));
        let out = tokio::select! {
            out = shielded_timeout(at, &shield, work) => out,
            () = async {
                tokio::time::sleep(Duration::from_millis(40)).await;
                drop(guard);
                std::future::pending::<()>().await
            } => unreachable!("never completes"),
        };
        assert!(out.is_ok(), "work that finishes while an effect holds the deadline off is kept");
    }
}
