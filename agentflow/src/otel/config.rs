//! What `Otel::from_env` reads from the standard OpenTelemetry variables (a pure parser over a
//! lookup, so it is tested without touching the process environment).

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// OTLP/HTTP with protobuf bodies (the default).
    HttpProtobuf,
    /// OTLP/gRPC (feature `otel-grpc`).
    Grpc,
}

/// A variable whose value is not one it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadVar {
    pub(crate) name: &'static str,
    pub(crate) value: String,
    pub(crate) accepts: &'static str,
}

/// The settings the variables give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvSettings {
    pub(crate) protocol: Protocol,
    pub(crate) service_name: Option<String>,
    /// Whether `OTEL_RESOURCE_ATTRIBUTES` names the service (`service.name=...`).
    pub(crate) resource_names_service: bool,
    pub(crate) capture_content: bool,
    /// The first variable with a value it does not accept (reported when the layer is built).
    pub(crate) bad: Option<BadVar>,
}

pub(crate) const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
pub(crate) const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
pub(crate) const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
pub(crate) const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
pub(crate) const RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// Reads the settings through `var` (the traces-specific protocol variable wins over the
/// general one; empty values count as unset).
pub(crate) fn read(var: impl Fn(&str) -> Option<String>) -> EnvSettings {
    let get = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let mut bad = None;
    let protocol = match [TRACES_PROTOCOL, PROTOCOL].into_iter().find_map(|n| get(n).map(|v| (n, v))) {
        None => Protocol::HttpProtobuf,
        Some((_, v)) if v == "http/protobuf" => Protocol::HttpProtobuf,
        Some((_, v)) if v == "grpc" => Protocol::Grpc,
        Some((name, value)) => {
            bad.get_or_insert(BadVar { name, value, accepts: "`http/protobuf` or `grpc`" });
            Protocol::HttpProtobuf
        }
    };
    let capture_content = match get(CAPTURE_CONTENT) {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(value) => {
            bad.get_or_insert(BadVar { name: CAPTURE_CONTENT, value, accepts: "`true` or `false`" });
            false
        }
    };
    let resource_names_service = get(RESOURCE_ATTRIBUTES).is_some_and(|attrs| {
        attrs
            .split(',')
            .any(|pair| pair.split_once('=').is_some_and(|(k, v)| k.trim() == "service.name" && !v.trim().is_empty()))
    });
    EnvSettings { protocol, service_name: get(SERVICE_NAME), resource_names_service, capture_content, bad }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> EnvSettings {
        read(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn nothing_set_means_http_no_content() {
        let s = with(&[]);
        assert_eq!((s.protocol, s.service_name, s.capture_content, s.bad), (Protocol::HttpProtobuf, None, false, None));
        assert!(!s.resource_names_service);
    }

    #[test]
    fn the_variables_are_read() {
        let s = with(&[(PROTOCOL, "grpc"), (SERVICE_NAME, "refunds"), (CAPTURE_CONTENT, "TRUE")]);
        assert_eq!(s.protocol, Protocol::Grpc);
        assert_eq!(s.service_name.as_deref(), Some("refunds"));
        assert!(s.capture_content);
        assert_eq!(s.bad, None);
    }

    #[test]
    fn the_traces_protocol_wins() {
        let s = with(&[(PROTOCOL, "grpc"), (TRACES_PROTOCOL, "http/protobuf")]);
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
    }

    #[test]
    fn bad_values_are_named() {
        let s = with(&[(PROTOCOL, "http/json"), (CAPTURE_CONTENT, "yes")]);
        let bad = s.bad.expect("a bad value");
        assert_eq!((bad.name, bad.value.as_str()), (PROTOCOL, "http/json"));
        let s = with(&[(CAPTURE_CONTENT, "yes"), (SERVICE_NAME, "")]);
        assert_eq!(s.bad.map(|b| b.name), Some(CAPTURE_CONTENT));
        assert!(!s.capture_content);
        assert_eq!(s.service_name, None);
    }

    #[test]
    fn the_resource_attributes_may_name_the_service() {
        assert!(with(&[(RESOURCE_ATTRIBUTES, "team=a, service.name=refunds")]).resource_names_service);
        assert!(!with(&[(RESOURCE_ATTRIBUTES, "team=a,service.name=")]).resource_names_service);
        assert!(!with(&[(RESOURCE_ATTRIBUTES, "service.namespace=x")]).resource_names_service);
    }
}
