//! The W3C `traceparent` of a thread's root span, and linking a span to it as its remote parent.

use std::fmt;

use tracing::Span;

/// A W3C trace context: `00-{32 hex trace id}-{16 hex span id}-{2 hex flags}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceParent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

impl TraceParent {
    /// The context `text` writes, or `None` when it is not a version-00 `traceparent` with
    /// lowercase hex and non-zero ids.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || version != "00" {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        let mut flag = [0u8; 1];
        hex_into(trace, &mut trace_id)?;
        hex_into(span, &mut span_id)?;
        hex_into(flags, &mut flag)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent { trace_id, span_id, flags: flag[0] })
    }

    /// The 32 hex digits of the trace id.
    #[allow(dead_code)]
    pub(crate) fn trace_id_hex(&self) -> String {
        self.to_string()[3..35].to_string()
    }
}

/// Fills `out` from exactly `2 * out.len()` lowercase hex digits.
fn hex_into(text: &str, out: &mut [u8]) -> Option<()> {
    let bytes = text.as_bytes();
    if bytes.len() != out.len() * 2 {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    for (i, o) in out.iter_mut().enumerate() {
        *o = digit(bytes[2 * i])? << 4 | digit(bytes[2 * i + 1])?;
    }
    Some(())
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        self.trace_id.iter().try_for_each(|b| write!(f, "{b:02x}"))?;
        f.write_str("-")?;
        self.span_id.iter().try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, "-{:02x}", self.flags)
    }
}

/// Whether `span` can take a remote parent: an OpenTelemetry layer was built in this process
/// and the span is enabled. Cheap: callers check it before reading a stored trace.
pub(crate) fn linkable(span: &Span) -> bool {
    super::capture::installed() && !span.is_disabled()
}

/// Makes `tp` the remote parent of `span`, which must not have been entered yet (a no-op
/// without the `otel` feature, or when no OpenTelemetry layer sees the span).
pub(crate) fn link(span: &Span, tp: &TraceParent) {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let remote = SpanContext::new(
            TraceId::from_bytes(tp.trace_id),
            SpanId::from_bytes(tp.span_id),
            TraceFlags::new(tp.flags),
            true,
            TraceState::default(),
        );
        // A span already started or not seen by the layer keeps its parent: nothing to do.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, tp);
}

/// The trace context of `span` when an OpenTelemetry layer records it (`None` otherwise, and
/// always without the `otel` feature). It starts the span: set its parent first.
pub(crate) fn root_of(span: &Span) -> Option<TraceParent> {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        if span.is_disabled() {
            return None;
        }
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| TraceParent {
            trace_id: sc.trace_id().to_bytes(),
            span_id: sc.span_id().to_bytes(),
            flags: sc.trace_flags().to_u8(),
        })
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = span;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips() {
        let tp = TraceParent::parse(GOOD).expect("valid");
        assert_eq!(tp.to_string(), GOOD);
        assert_eq!(tp.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").map(|t| t.flags),
            Some(0)
        );
    }

    #[test]
    fn bad_shapes_are_refused() {
        for bad in [
            "",
            "00",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn without_a_layer_nothing_links() {
        let span = tracing::info_span!("x");
        assert!(!linkable(&span));
        assert_eq!(root_of(&span), None);
    }

    #[cfg(feature = "otel")]
    #[test]
    fn a_linked_span_joins_the_stored_trace() {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let root = tracing::info_span!(parent: None, "create_thread");
            let tp = root_of(&root).expect("a recorded root");
            let stored = TraceParent::parse(&tp.to_string()).expect("its own format");
            let invoke = tracing::info_span!("invoke_agent");
            link(&invoke, &stored);
            let child = root_of(&invoke).expect("recorded");
            assert_eq!(child.trace_id, tp.trace_id);
            assert_ne!(child.span_id, tp.span_id);
            // Without a link, a new root starts another trace.
            let other = root_of(&tracing::info_span!(parent: None, "other")).expect("recorded");
            assert_ne!(other.trace_id, tp.trace_id);
        });
    }
}
