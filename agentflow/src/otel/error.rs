//! What can go wrong setting up the OpenTelemetry export.

/// Why the OpenTelemetry export could not be set up or shut down.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// An `OTEL_*` variable holds a value it does not accept.
    #[error("{name}={value:?} is not accepted: set it to {accepts}, or unset it")]
    BadVariable {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it accepts.
        accepts: &'static str,
    },
    /// The OTLP exporter could not be built (an endpoint or header it cannot use, ...).
    #[error("the OTLP exporter could not be built: {0}; check the OTEL_EXPORTER_OTLP_* variables")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` without the `otel-grpc` feature.
    #[error("OTLP over gRPC needs the `otel-grpc` feature of agentflow-runtime; enable it or use `http/protobuf`")]
    GrpcNotEnabled,
    /// The gRPC exporter was set up outside a multi-threaded tokio runtime (none, or a
    /// current-thread one, where the export would stall while the thread is busy).
    #[error(
        "the OTLP gRPC exporter must be set up inside a multi-threaded tokio runtime (not a current-thread one); call it from `#[tokio::main]` (the default flavor) or use `http/protobuf`"
    )]
    GrpcNeedsRuntime,
    /// `init` found a global `tracing` subscriber already set.
    #[error("a global tracing subscriber is already set; add `Otel::layer()` to it instead of calling `init`")]
    SubscriberAlreadySet,
    /// Flushing or shutting the exporter down failed (spans may be lost).
    #[error("the OpenTelemetry exporter failed to flush or shut down: {0}; check that the collector is reachable")]
    Shutdown(#[from] opentelemetry_sdk::error::OTelSdkError),
}
