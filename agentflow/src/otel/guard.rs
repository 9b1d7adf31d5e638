//! The guard that owns the tracer provider and flushes it at the end.

use opentelemetry_sdk::trace::SdkTracerProvider;

use super::OtelError;

/// Owns the exporter: dropping it flushes the spans still queued and shuts the exporter down
/// (errors ignored); [`shutdown`](Self::shutdown) does the same and returns them. Keep it
/// alive for as long as spans are made (e.g. a `let _guard` in `main`).
#[must_use = "dropping the guard shuts the exporter down at once"]
#[derive(Debug)]
pub struct OtelGuard {
    provider: Option<SdkTracerProvider>,
}

impl OtelGuard {
    pub(super) fn new(provider: SdkTracerProvider) -> Self {
        OtelGuard { provider: Some(provider) }
    }

    /// Flushes the spans still queued and shuts the exporter down.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        let Some(provider) = self.provider.take() else { return Ok(()) };
        let flushed = provider.force_flush();
        let shut = provider.shutdown();
        flushed?;
        shut?;
        Ok(())
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.force_flush();
            let _ = provider.shutdown();
        }
    }
}
