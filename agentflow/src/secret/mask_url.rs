//! A URL that may carry a credential (a webhook's) as audit entries and logs show it:
//! [`mask_url`].

/// What stands for a hidden part of a URL.
const HIDDEN: &str = "***";

/// `url` with what may carry a credential hidden: the user name and password (`***@`, also in
/// a URL whose scheme has no `//`, as `redis:user:pass@host`), each query value (`?key=***`; a
/// query part without `=` is `***` whole), the fragment (`#***`), and each path segment that
/// is not plainly a name. A name is kept: lower-case letters in words of at most 15 letters
/// (those over three with a vowel), joined by `-`, `_` or `.` (`done`, `notifications-webhook`), or an API
/// version (`v1`, `v2`). Every other segment (digits, capitals, a `:`, a `%` escape, a long or
/// vowel-less run of letters: what keys and ids look like) is `***`. The scheme, host and port
/// stay, so the receiver is still told apart. Read as a URL parser reads it: leading and
/// trailing spaces and control characters are left out and `\` separates path segments as `/`
/// does; a text without a scheme is `***` whole. Audit entries and logs name a webhook URL only
/// this way; the delivery itself goes to the URL as given.
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
///     "https://hooks.example.com/services/***/***/***"
/// );
/// assert_eq!(mask_url("redis:user:pass@cache.example:6379/0"), "redis:***@cache.example:6379/***");
/// assert_eq!(mask_url("not a url?secret=1"), "***");
/// ```
pub fn mask_url(url: &str) -> String {
    // As a URL parser reads it: leading and trailing spaces and control characters left out,
    // tabs and line breaks inside dropped.
    let url: String = url
        .trim_matches(|c: char| c.is_whitespace() || c.is_control())
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((before, _)) => (before, Some(HIDDEN)),
        None => (url.as_str(), None),
    };
    let (base, query) = match before_fragment.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (before_fragment, None),
    };
    // `\` separates the path as `/` does (an http(s) URL parser reads it so).
    let base = base.replace('\\', "/");
    let mut out = String::with_capacity(url.len());
    match split_scheme(&base) {
        Some((scheme, rest)) => {
            let (slashes, rest) = match rest.strip_prefix("//") {
                Some(rest) => ("//", rest),
                None => ("", rest),
            };
            let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
            out.push_str(scheme);
            out.push(':');
            out.push_str(slashes);
            if let Some((_, host)) = authority.rsplit_once('@') {
                out.push_str(HIDDEN);
                out.push('@');
                out.push_str(host);
            } else {
                out.push_str(authority);
            }
            out.push_str(&mask_path(path));
        }
        // Not a URL this can tell the parts of: nothing of it is shown.
        None if base.is_empty() && query.is_none() && fragment.is_none() => return String::new(),
        None => return HIDDEN.to_string(),
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

/// `url`'s scheme and what follows its `:`, if it starts with one (a letter, then letters,
/// digits, `+`, `-` or `.`).
fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    let valid = first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some((scheme, rest))
}

/// `path` with each segment that is not [`a_name`] hidden.
fn mask_path(path: &str) -> String {
    path.split('/').map(|segment| if a_name(segment) { segment } else { HIDDEN }).collect::<Vec<_>>().join("/")
}

/// The longest word of a path segment kept as a name.
const LONGEST_WORD: usize = 15;

/// Whether path segment `segment` is plainly a name, kept as it is: empty, an API version
/// (`v` and one to three digits), or words of lower-case letters (at most [`LONGEST_WORD`]
/// each, those over three letters with a vowel) joined by `-`, `_` or `.`.
fn a_name(segment: &str) -> bool {
    if segment.is_empty() {
        return true;
    }
    if let Some(version) = segment.strip_prefix('v')
        && (1..=3).contains(&version.len())
        && version.chars().all(|c| c.is_ascii_digit())
    {
        return true;
    }
    segment.split(['-', '_', '.']).all(|word| {
        (1..=LONGEST_WORD).contains(&word.len())
            && word.chars().all(|c| c.is_ascii_lowercase())
            && (word.len() <= 3 || word.chars().any(|c| matches!(c, 'a' | 'e' | 'i' | 'o' | 'u' | 'y')))
    })
}

#[cfg(test)]
mod tests {
    use super::mask_url;

    #[test]
    fn credentials_in_the_user_info_the_query_and_the_fragment_are_hidden() {
        let cases = [
            ("https://hooks.example.com/api/done", "https://hooks.example.com/api/done"),
            ("https://hooks.example.com:8443/v2/in", "https://hooks.example.com:8443/v2/in"),
            ("https://user@hooks.example.com/a", "https://***@hooks.example.com/a"),
            ("http://u:p@ss@hooks.example.com", "http://***@hooks.example.com"),
            ("https://h.example/x?token=T0K3N", "https://h.example/x?token=***"),
            ("https://h.example/x?a=1&b&c=", "https://h.example/x?a=***&***&c=***"),
            ("https://h.example/x?sig=a=b", "https://h.example/x?sig=***"),
            ("https://h.example/x#access_token=T", "https://h.example/x#***"),
            ("https://h.example?k=v", "https://h.example?k=***"),
            ("not a url?secret=1", "***"),
            ("", ""),
        ];
        for (url, shown) in cases {
            assert_eq!(mask_url(url), shown, "{url}");
        }
        // Nothing of a secret stays.
        let paths = [
            (
                "https://hooks.example/services/T000/B000/XXXXSECRETXXXX1234abcd",
                "https://hooks.example/services/***/***/***",
            ),
            (
                "https://discord.example/api/webhooks/123456789012345678/Ab-cD_ef0123456789GhIjKlMn",
                "https://discord.example/api/webhooks/***/***",
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

    /// Each kind of path token, and credentials in a URL without `//`: nothing of them stays.
    #[test]
    fn short_single_class_escaped_and_colon_holding_tokens_are_hidden() {
        let cases = [
            // Short (under 16 characters), mixing classes.
            ("https://h.example/hook/aZ3kP9q", "https://h.example/hook/***"),
            // One class only: digits, capitals, a long run of lower-case letters.
            ("https://h.example/hook/84613920571", "https://h.example/hook/***"),
            ("https://h.example/hook/QWERTYUIOPASDFGH", "https://h.example/hook/***"),
            ("https://h.example/hook/qwhdkslapzmxncbvtr", "https://h.example/hook/***"),
            ("https://h.example/hook/xkcdq", "https://h.example/hook/***"),
            // A `:` or a `%` escape.
            ("https://h.example/hook/user:pass", "https://h.example/hook/***"),
            ("https://h.example/hook/s3cr%2Ft", "https://h.example/hook/***"),
            ("https://h.example/hook/secret%20key", "https://h.example/hook/***"),
            // A scheme without `//`.
            ("redis:user:pass@cache.example:6379/0", "redis:***@cache.example:6379/***"),
            ("mailto:ops@example.com", "mailto:***@example.com"),
        ];
        for (url, shown) in cases {
            assert_eq!(mask_url(url), shown, "{url}");
        }
        for secret in ["aZ3kP9q", "84613920571", "user", "pass", "s3cr", "ops", "qwhdks"] {
            for (url, _) in cases {
                assert!(!mask_url(url).contains(secret), "{url}: {}", mask_url(url));
            }
        }
        // Names stay.
        let kept = "https://h.example/agentflow/notifications-webhook/run.done/v1";
        assert_eq!(mask_url(kept), kept);
    }

    /// A URL parser reads `\` as `/` in an http(s) URL: the path after a `\` is still masked.
    #[test]
    fn a_path_separated_by_backslashes_is_masked() {
        let cases = [
            (r"https://hooks.slack.com\services\T0\B0\SECRET", "https://hooks.slack.com/services/***/***/***"),
            (r"https:\\hooks.slack.com\services/T0\B0/SECRET", "https://hooks.slack.com/services/***/***/***"),
            (r"https://u:p@hooks.slack.com\x@y\SECRET", "https://***@hooks.slack.com/***/***"),
        ];
        for (url, shown) in cases {
            let masked = mask_url(url);
            assert_eq!(masked, shown, "{url}");
            assert!(!masked.contains("SECRET") && !masked.contains("T0"), "{url}: {masked}");
        }
    }

    /// A URL parser leaves out leading and trailing spaces and control characters: such a URL
    /// is masked as the URL it is read as, and a text without a scheme is hidden whole.
    #[test]
    fn surrounding_spaces_and_control_characters_do_not_leave_a_url_unmasked() {
        let cases = [
            (" https://hooks.slack.com/services/T0/B0/SECRET", "https://hooks.slack.com/services/***/***/***"),
            (
                "\u{1}\t https://hooks.slack.com/services/T0/B0/SECRET \n\0",
                "https://hooks.slack.com/services/***/***/***",
            ),
            ("https://hooks.slack.com/services/T0/B0/SEC\nRET", "https://hooks.slack.com/services/***/***/***"),
            ("ht\ttps://hooks.slack.com/services/T0/B0/SECRET", "https://hooks.slack.com/services/***/***/***"),
            ("\u{7f}//hooks.slack.com/services/T0/B0/SECRET", "***"),
            ("hooks.slack.com/services/T0/B0/SECRET", "***"),
            ("1https://hooks.slack.com/services/T0/B0/SECRET?k=v#f", "***"),
        ];
        for (url, shown) in cases {
            let masked = mask_url(url);
            assert_eq!(masked, shown, "{url:?}");
            assert!(!masked.contains("SEC") && !masked.contains("T0"), "{url:?}: {masked}");
        }
    }
}
