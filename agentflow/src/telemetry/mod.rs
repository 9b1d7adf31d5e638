//! OpenTelemetry-shaped `tracing` spans of runs, in the GenAI semantic conventions: the span
//! and attribute names, one constructor per span kind, the W3C trace context a thread keeps,
//! and the opt-in capture of message contents with its masking.
//!
//! Without the `otel` feature (or with no subscriber) the spans are plain `tracing` spans that
//! cost what a disabled span costs; linking to a stored trace is a no-op.

pub(crate) mod attrs;
pub(crate) mod capture;
pub(crate) mod content;
pub(crate) mod names;
pub(crate) mod parent;
pub(crate) mod spans;

pub(crate) use parent::TraceParent;
