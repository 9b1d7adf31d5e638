//! The `Host` names a server answers to.

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};

/// The `Host` names a server bound to one address answers to: the address itself (with its
/// port), `localhost`, `127.0.0.1` and `[::1]` (with the bound port) when bound to loopback or
/// to every address, and the names added with
/// [`ServeLimits::allow_host`](super::ServeLimits::allow_host) (any port unless one is given).
/// Names compare ignoring ASCII case.
#[derive(Debug, Clone)]
pub struct HostAllowList {
    /// `(name, port)`: a port of `None` accepts any.
    allowed: Vec<(String, Option<u16>)>,
}

/// `host[:port]` split into its lowercase name and its port (`None` when not given).
fn split(host: &str) -> Option<(String, Option<u16>)> {
    let host = host.trim();
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        (format!("[{inside}]"), after.strip_prefix(':'))
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name.to_string(), Some(port)),
            None => (host.to_string(), None),
        }
    };
    if name.is_empty() || name.contains(['/', '@', ' ']) {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    Some((name.to_ascii_lowercase(), port))
}

impl HostAllowList {
    /// The names a server bound to `local` answers to, with `extra` added.
    pub fn new(local: SocketAddr, extra: &[String]) -> Self {
        let port = Some(local.port());
        let mut allowed = Vec::new();
        let ip = local.ip();
        if !ip.is_unspecified() {
            let shown = match ip {
                std::net::IpAddr::V4(v4) => v4.to_string(),
                std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            };
            allowed.push((shown, port));
        }
        if ip.is_loopback() || ip.is_unspecified() {
            for name in ["localhost", "127.0.0.1", "[::1]"] {
                allowed.push((name.to_string(), port));
            }
        }
        allowed.extend(extra.iter().filter_map(|h| split(h)));
        HostAllowList { allowed }
    }

    /// Whether a request naming `host` (a `Host` header's value) is answered. A `Host` without
    /// a port names port 80.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split(host) else { return false };
        let port = port.unwrap_or(80);
        self.allowed.iter().any(|(n, p)| *n == name && p.is_none_or(|p| p == port))
    }

    /// The refusal of a request whose `Host` is missing (400) or not allowed (421), or `None`
    /// when it may be served.
    pub fn refusal(&self, headers: &HeaderMap) -> Option<Response<Body>> {
        let host = headers.get(header::HOST).map(|v| v.to_str().unwrap_or_default());
        let (status, text) = match host {
            None => (StatusCode::BAD_REQUEST, "The request names no host (a `Host` header). Nothing was done.\n"),
            Some(h) if !self.allows(h) => (
                StatusCode::MISDIRECTED_REQUEST,
                "This server does not answer to that host name. Open it by the address it listens on, or have \
                 its operator allow the name. Nothing was done.\n",
            ),
            Some(_) => return None,
        };
        let mut r = Response::new(Body::from(text));
        *r.status_mut() = status;
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_with_the_port_and_added_names_are_allowed() {
        let list = HostAllowList::new("127.0.0.1:8700".parse().unwrap(), &["Inbox.Example.com".into()]);
        for ok in [
            "127.0.0.1:8700",
            "localhost:8700",
            "LOCALHOST:8700",
            "[::1]:8700",
            "inbox.example.com",
            "inbox.example.com:443",
        ] {
            assert!(list.allows(ok), "{ok}");
        }
        for refused in
            ["evil.example:8700", "localhost:8701", "localhost", "127.0.0.1", "", "a@localhost:8700", "localhost:x"]
        {
            assert!(!list.allows(refused), "{refused}");
        }
        let remote = HostAllowList::new("10.1.2.3:80".parse().unwrap(), &["inbox:8443".into()]);
        assert!(remote.allows("10.1.2.3") && remote.allows("inbox:8443"));
        assert!(!remote.allows("localhost:80") && !remote.allows("inbox:8444"));
    }
}
