//! OpenTelemetry traces of runs in the GenAI semantic conventions, exported over OTLP.
//!
//! Runs emit `tracing` spans named and attributed as the GenAI semantic conventions
//! ([`SEMCONV_VERSION`]) say: `invoke_agent` per invocation, `step` and `node` spans, `chat`
//! per model call, `execute_tool` per tool call, approval waits and decisions, compensations.
//! A durable thread keeps the trace context of a short `create_thread` root span in its record,
//! and every invocation of the thread, in any process, is a child of it: one trace per thread
//! across pauses and processes.
//!
//! [`Otel`] builds the exporter from the standard `OTEL_*` variables and hands back a
//! `tracing` layer for your subscriber ([`Otel::layer`]) or installs one ([`Otel::init`]).
//! Message contents, tool arguments and results go on spans only when you opt in
//! ([`Otel::capture_content`]); credentials and the state's personal fields are masked first.
//!
//! ```no_run
//! # fn main() -> Result<(), agentflow::otel::OtelError> {
//! let guard = agentflow::otel::Otel::from_env().service_name("refund-agent").init()?;
//! // ... run graphs ...
//! guard.shutdown()?; // flushes the spans still queued
//! # Ok(())
//! # }
//! ```

mod config;
mod error;
mod guard;

pub use error::OtelError;
pub use guard::OtelGuard;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::telemetry::capture;
use config::{EnvSettings, Protocol};

/// The version of the OpenTelemetry GenAI semantic conventions the spans follow (the one where
/// `gen_ai.system` became `gen_ai.provider.name` and messages are `gen_ai.input.messages` /
/// `gen_ai.output.messages`). The conventions are still marked in development.
pub const SEMCONV_VERSION: &str = crate::telemetry::names::SEMCONV_VERSION;

/// The `tracing` layer that turns agentflow's spans (and any others) into OpenTelemetry spans.
pub type OtelLayer<S> = tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>;

/// The crates the export runs through (HTTP/2, gRPC, HTTP clients), and the MCP client's:
/// their own spans, made while spans are exported, must not reach the layer, or every export
/// makes more to export. [`exporter_filter`] keeps them out (a crate matches by its exact name
/// or its modules, `tower::...`, not `tower_http`).
pub const EXPORTER_CRATES: &[&str] = &[
    "h2",
    "tonic",
    "hyper",
    "hyper_util",
    "tower",
    "reqwest",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry_otlp",
    "rmcp",
];

/// The per-layer filter for [`Otel::layer`] that [`Otel::init`] uses: spans only (no events,
/// whose fields may hold error messages or other content), at level INFO and above, none from
/// [`EXPORTER_CRATES`]. Add the layer as `layer.with_filter(agentflow::otel::exporter_filter())`.
pub fn exporter_filter() -> tracing_subscriber::filter::FilterFn {
    tracing_subscriber::filter::FilterFn::new(exported as fn(&tracing::Metadata<'_>) -> bool)
        .with_max_level_hint(tracing::level_filters::LevelFilter::INFO)
}

/// Whether [`exporter_filter`] lets `meta` through.
fn exported(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_span() && *meta.level() <= tracing::Level::INFO && !from_exporter_crate(meta.target())
}

/// Whether `target` is one of [`EXPORTER_CRATES`] or a module of one.
fn from_exporter_crate(target: &str) -> bool {
    EXPORTER_CRATES.iter().any(|c| target.strip_prefix(c).is_some_and(|rest| rest.is_empty() || rest.starts_with("::")))
}

/// The service name when neither [`Otel::service_name`] nor `OTEL_SERVICE_NAME` gives one.
const DEFAULT_SERVICE_NAME: &str = "agentflow";

/// The OpenTelemetry export setup: a builder.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Otel {
    env: EnvSettings,
    service_name: Option<String>,
    capture_content: Option<bool>,
}

impl Otel {
    /// Configured by the standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT` /
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `_HEADERS`, `_TIMEOUT` (read by the exporter),
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` / `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (`http/protobuf`,
    /// the default; `grpc` needs feature `otel-grpc`), `OTEL_SERVICE_NAME`, the batch
    /// processor's `OTEL_BSP_*`, and `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`
    /// (`true` opts in to contents). A value a variable does not accept is reported by
    /// [`layer`](Self::layer) and [`init`](Self::init).
    pub fn from_env() -> Self {
        Otel { env: config::read(|name| std::env::var(name).ok()), service_name: None, capture_content: None }
    }

    /// The `service.name` of the spans' resource (over `OTEL_SERVICE_NAME`; default `agentflow`).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// Message contents, tool arguments and results on spans (masked: credentials redacted,
    /// the state's personal and credential field values replaced by `•••`): off unless opted in
    /// here or by `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. This overrides the
    /// variable.
    pub fn capture_content(mut self, yes: bool) -> Self {
        self.capture_content = Some(yes);
        self
    }

    /// The `tracing` layer to add to your subscriber, and the guard that flushes and shuts the
    /// exporter down when dropped (or through [`OtelGuard::shutdown`]). Building it turns the
    /// content opt-in on or off for the whole process. The layer takes whatever its filter lets
    /// through: add it with [`exporter_filter`] (spans only, INFO and above, none of
    /// [`EXPORTER_CRATES`]), as [`init`](Self::init) does, so that no event's fields (error
    /// messages, other content) become span events and the export does not trace itself.
    pub fn layer<S>(self) -> Result<(OtelLayer<S>, OtelGuard), OtelError>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let (layer, guard, capture_content) = self.build()?;
        capture::set_capture(capture_content);
        capture::set_installed();
        Ok((layer, guard))
    }

    /// The layer, its guard and whether contents are captured; no process-wide flag is set.
    fn build<S>(self) -> Result<(OtelLayer<S>, OtelGuard, bool), OtelError>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        // An explicit `capture_content` makes the variable's value irrelevant.
        let bad =
            self.env.bad.clone().filter(|b| !(b.name == config::CAPTURE_CONTENT && self.capture_content.is_some()));
        if let Some(bad) = bad {
            return Err(OtelError::BadVariable { name: bad.name, value: bad.value, accepts: bad.accepts });
        }
        let exporter = exporter(self.env.protocol)?;
        // `Resource::builder` reads `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` itself;
        // the name is set here only from the builder, or as the default when neither gives one.
        let name = match (self.service_name, self.env.service_name) {
            (Some(name), _) | (None, Some(name)) => Some(name),
            (None, None) if self.env.resource_names_service => None,
            (None, None) => Some(DEFAULT_SERVICE_NAME.to_string()),
        };
        let mut resource = Resource::builder();
        if let Some(name) = name {
            resource = resource.with_service_name(name);
        }
        let resource = resource.with_attribute(KeyValue::new("process.pid", i64::from(std::process::id()))).build();
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        let tracer = provider.tracer("agentflow");
        // No `code.*`, `thread.*` nor busy/idle times on every span: they cost per span and
        // say little here (call `with_location(true)` etc. on the layer to have them).
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false);
        let capture_content = self.capture_content.unwrap_or(self.env.capture_content);
        Ok((layer, OtelGuard::new(provider), capture_content))
    }

    /// A registry with just this layer installed as the global default `tracing` subscriber
    /// (for programs with no `tracing` setup of their own), filtered by [`exporter_filter`]:
    /// spans only, at level INFO and above, none of the exporter's own crates.
    pub fn init(self) -> Result<OtelGuard, OtelError> {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        let (layer, guard, capture_content) = self.build::<tracing_subscriber::Registry>()?;
        let subscriber = tracing_subscriber::registry().with(layer.with_filter(exporter_filter()));
        tracing::subscriber::set_global_default(subscriber).map_err(|_| OtelError::SubscriberAlreadySet)?;
        // Only now: a failed install leaves contents off and spans unlinked.
        capture::set_capture(capture_content);
        capture::set_installed();
        Ok(guard)
    }
}

/// The OTLP span exporter for `protocol` (endpoint, headers, timeout and compression from the
/// `OTEL_EXPORTER_OTLP_*` variables, read by `opentelemetry-otlp`).
fn exporter(protocol: Protocol) -> Result<opentelemetry_otlp::SpanExporter, OtelError> {
    use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
    match protocol {
        Protocol::HttpProtobuf => {
            Ok(SpanExporter::builder().with_http().with_protocol(opentelemetry_otlp::Protocol::HttpBinary).build()?)
        }
        #[cfg(feature = "otel-grpc")]
        Protocol::Grpc => {
            // tonic's channel runs on the caller's runtime; on a current-thread one it would only
            // make progress while that thread polls, stalling the batch thread's exports.
            let multi_thread = tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
            if !multi_thread {
                return Err(OtelError::GrpcNeedsRuntime);
            }
            Ok(SpanExporter::builder().with_tonic().with_protocol(opentelemetry_otlp::Protocol::Grpc).build()?)
        }
        #[cfg(not(feature = "otel-grpc"))]
        Protocol::Grpc => Err(OtelError::GrpcNotEnabled),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error `layer` fails with.
    fn refused(otel: Otel) -> OtelError {
        match otel.layer::<tracing_subscriber::Registry>() {
            Ok(_) => panic!("the layer was built"),
            Err(e) => e,
        }
    }

    fn with(vars: &[(&str, &str)]) -> Otel {
        let env = config::read(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()));
        Otel { env, service_name: None, capture_content: None }
    }

    #[test]
    fn a_bad_variable_is_refused_by_name() {
        let err = refused(with(&[(config::CAPTURE_CONTENT, "yes")]));
        assert!(matches!(err, OtelError::BadVariable { name: config::CAPTURE_CONTENT, .. }), "{err}");
        assert!(err.to_string().contains("`true` or `false`"), "{err}");
    }

    #[test]
    fn an_explicit_capture_setting_skips_the_variable() {
        let otel = with(&[(config::CAPTURE_CONTENT, "yes"), (config::PROTOCOL, "http/json")]).capture_content(false);
        assert!(matches!(refused(otel), OtelError::BadVariable { name: config::PROTOCOL, .. }));
    }

    #[test]
    fn the_filter_takes_info_spans_of_other_crates_only() {
        for c in EXPORTER_CRATES {
            assert!(from_exporter_crate(c) && from_exporter_crate(&format!("{c}::client")), "{c}");
        }
        for other in ["tower_http", "h2o_service", "hyperion", "reqwest_retry", "agentflow"] {
            assert!(!from_exporter_crate(other), "{other}");
        }
    }

    #[test]
    fn the_filter_keeps_spans_and_drops_events() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::Layer::with_filter(Recorder(seen.clone()), exporter_filter()));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("kept");
            span.in_scope(|| tracing::warn!(error = "ada@example.com", "node failed"));
            tracing::debug_span!("too_fine").in_scope(|| ());
        });
        assert_eq!(*seen.lock().expect("lock"), ["span kept"]);
    }

    /// Records the names of the spans and events it sees.
    struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            _: &tracing::span::Id,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            self.0.lock().expect("lock").push(format!("span {}", attrs.metadata().name()));
        }

        fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            self.0.lock().expect("lock").push(format!("event {}", event.metadata().name()));
        }
    }

    #[cfg(feature = "otel-grpc")]
    #[test]
    fn grpc_needs_a_multi_threaded_runtime() {
        let err = refused(with(&[(config::PROTOCOL, "grpc")]));
        assert!(matches!(err, OtelError::GrpcNeedsRuntime), "{err}");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let err = rt.block_on(async { refused(with(&[(config::PROTOCOL, "grpc")])) });
        assert!(matches!(err, OtelError::GrpcNeedsRuntime), "{err}");
        assert!(err.to_string().contains("current-thread"), "{err}");
    }

    #[cfg(not(feature = "otel-grpc"))]
    #[test]
    fn grpc_needs_its_feature() {
        let err = refused(with(&[(config::PROTOCOL, "grpc")]));
        assert!(matches!(err, OtelError::GrpcNotEnabled), "{err}");
    }
}
