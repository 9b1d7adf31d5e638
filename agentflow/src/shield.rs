//! Shielding journaled effects from timeouts: a node timeout or the run's
//! deadline waits for an effect in flight to end before it stops the node.

use std::future::Future;
use std::sync::Arc;

/// Counts journaled effects in flight. A node timeout or the run's deadline
/// that falls while one runs waits for it to end (and be journaled) before
/// it stops the node: an effect that started is never cut off mid-call.
#[derive(Debug, Clone)]
pub(crate) struct Shield(Arc<tokio::sync::watch::Sender<usize>>);

impl Default for Shield {
    fn default() -> Self {
        Shield(Arc::new(tokio::sync::watch::Sender::new(0)))
    }
}

impl Shield {
    pub(crate) fn enter(&self) -> Entered {
        self.0.send_modify(|n| *n += 1);
        Entered(Arc::clone(&self.0))
    }

    /// Completes when no effect is in flight.
    async fn idle(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

pub(crate) struct Entered(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
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
