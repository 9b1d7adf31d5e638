//! A URL that may carry a credential (a webhook's) as audit entries and logs show it:
//! [`mask_url`].

/// What stands for a hidden part of a URL.
const HIDDEN: &str = "***";

/// `url` with what may carry a credential hidden: the user name and password (`***@`), each
/// query value (`?key=***`; a query part without `=` is `***` whole), the fragment (`#***`),
/// and each path segment that looks like a token (16 characters or
/// more of letters, digits, `-` and `_`, mixing at least two of lower case, upper case and
/// digits, as the keys some services put in their webhook paths). The scheme, host, port and
/// the other path segments stay, so the receiver is still told apart. Audit entries and logs
/// name a webhook URL only this way; the delivery itself goes to the URL as given.
///
/// ```
/// use agentflow::secret::mask_url;
/// assert_eq!(
///     mask_url("https://ops:s3cret@hooks.example.com/done?token=abc&v=2#frag"),
///     "https://***@hooks.example.com/done?token=***&v=***#***"
/// );
/// assert_eq!(mask_url("https://hooks.example.com/done"), "https://hooks.example.com/done");
/// assert_eq!(
///     mask_url("https://hooks.example.com/services/T0001/B0001/aZ3kP9qLmN4rT7vX2bC8dE5f"),
///     "https://hooks.example.com/services/T0001/B0001/***"
/// );
/// ```
pub fn mask_url(url: &str) -> String {
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((before, _)) => (before, Some(HIDDEN)),
        None => (url, None),
    };
    let (base, query) = match before_fragment.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (before_fragment, None),
    };
    let mut out = String::with_capacity(url.len());
    match base.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
            out.push_str(scheme);
            out.push_str("://");
            if let Some((_, host)) = authority.rsplit_once('@') {
                out.push_str(HIDDEN);
                out.push('@');
                out.push_str(host);
            } else {
                out.push_str(authority);
            }
            out.push_str(&mask_path(path));
        }
        None => out.push_str(base),
    }
    if let Some(query) = query {
        out.push('?');
        let parts: Vec<String> = query
            .split('&')
            .map(|part| match part.split_once('=') {
                Some((key, _)) => format!("{key}={HIDDEN}"),
                None if part.is_empty() => String::new(),
                None => HIDDEN.to_string(),
            })
            .collect();
        out.push_str(&parts.join("&"));
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// `path` with each segment that [`looks_like_a_token`] hidden.
fn mask_path(path: &str) -> String {
    path.split('/')
        .map(|segment| if looks_like_a_token(segment) { HIDDEN } else { segment })
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether path segment `segment` looks like a key rather than a name: at least 16 characters,
/// all letters, digits, `-` or `_`, mixing at least two of lower case, upper case and digits.
fn looks_like_a_token(segment: &str) -> bool {
    let token_chars = segment.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let kinds = [
        segment.chars().any(|c| c.is_ascii_lowercase()),
        segment.chars().any(|c| c.is_ascii_uppercase()),
        segment.chars().any(|c| c.is_ascii_digit()),
    ];
    segment.len() >= 16 && token_chars && kinds.iter().filter(|k| **k).count() >= 2
}

#[cfg(test)]
mod tests {
    use super::mask_url;

    #[test]
    fn credentials_in_the_user_info_the_query_and_the_fragment_are_hidden() {
        let cases = [
            ("https://hooks.example.com/a/b", "https://hooks.example.com/a/b"),
            ("https://hooks.example.com:8443/a", "https://hooks.example.com:8443/a"),
            ("https://user@hooks.example.com/a", "https://***@hooks.example.com/a"),
            ("http://u:p@ss@hooks.example.com", "http://***@hooks.example.com"),
            ("https://h.example/x?token=T0K3N", "https://h.example/x?token=***"),
            ("https://h.example/x?a=1&b&c=", "https://h.example/x?a=***&***&c=***"),
            ("https://h.example/x?sig=a=b", "https://h.example/x?sig=***"),
            ("https://h.example/x#access_token=T", "https://h.example/x#***"),
            ("https://h.example?k=v", "https://h.example?k=***"),
            ("not a url?secret=1", "not a url?secret=***"),
            ("", ""),
        ];
        for (url, shown) in cases {
            assert_eq!(mask_url(url), shown, "{url}");
        }
        // Nothing of a secret stays.
        let paths = [
            (
                "https://hooks.example/services/T000/B000/XXXXSECRETXXXX1234abcd",
                "https://hooks.example/services/T000/B000/***",
            ),
            (
                "https://discord.example/api/webhooks/123456789012345678/Ab-cD_ef0123456789GhIjKlMn",
                "https://discord.example/api/webhooks/123456789012345678/***",
            ),
            (
                "https://teams.example/webhook/1f0e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/in",
                "https://teams.example/webhook/***/in",
            ),
            (
                "https://h.example/agentflow/notifications-webhook/done",
                "https://h.example/agentflow/notifications-webhook/done",
            ),
        ];
        for (url, shown) in paths {
            assert_eq!(mask_url(url), shown, "{url}");
        }
        let masked = mask_url("https://admin:hunter2@h.example/p?api_key=hunter3#hunter4");
        for secret in ["admin", "hunter2", "hunter3", "hunter4"] {
            assert!(!masked.contains(secret), "{masked}");
        }
    }
}
