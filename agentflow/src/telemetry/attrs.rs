//! Attributes `tracing` fields cannot carry (string arrays) and captured contents, set on the
//! OpenTelemetry span directly; without the `otel` feature they are dropped.

use tracing::Span;

/// Sets `key` to a string array on `span`'s OpenTelemetry span.
pub(crate) fn set_strings(span: &Span, key: &'static str, values: &[&str]) {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::{Array, StringValue, Value};
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let values: Vec<StringValue> = values.iter().map(|v| StringValue::from(v.to_string())).collect();
        span.set_attribute(key, Value::Array(Array::String(values)));
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, key, values);
}

/// Sets `key` to `text` on `span`'s OpenTelemetry span (captured content: the caller masked it).
pub(crate) fn set_text(span: &Span, key: &'static str, text: String) {
    #[cfg(feature = "otel")]
    {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        span.set_attribute(key, text);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, key, text);
}
