//! Users, login, sessions and CSRF tokens.
//!
//! The users file is JSON:
//!
//! ```json
//! { "users": [
//!     { "name": "alice", "token_sha256": "<hex SHA-256 of her token>", "roles": ["irreversible"],
//!       "tenants": ["acme"] },
//!     { "name": "bob", "token": "a-plain-token", "roles": [] }
//! ] }
//! ```
//!
//! `token_sha256` keeps the file free of the secret (`printf %s TOKEN | sha256sum`); `token`
//! (plain) is accepted for local trials. `tenants` (optional; absent: every tenant) lists the
//! tenants whose threads the user sees and acts on; `roles` are checked by the authorizer and
//! by the `--access` policy. A file is refused when a `token_sha256` is the hash
//! of the empty token, a plain token has spaces around it, or two user names could be taken
//! for one another (equal ignoring case, or confusable under Unicode's skeleton rules:
//! `alice` and `аlice` with a Cyrillic a, fullwidth `ａlice`; spaces around; characters other
//! than letters, digits, spaces and `. _ - @ + '`). An empty token never logs in. Logging in
//! with a token starts a session: a random id in an `HttpOnly; SameSite=Strict` cookie named
//! for the server's port, and a random CSRF token that every form of the session carries and
//! every POST must send back. Sessions live in the server's memory for 12 hours unless
//! `--session-ttl` says otherwise (a restart logs everyone out), at most
//! `--sessions-per-user` a user (a new login ends the oldest). Failed logins are limited per
//! client address (the login asks for a token only, so a wrong one names no user).

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use agentflow::approval::person_key;
use agentflow::serve_limits::{AttemptLimiter, ServeLimits, SessionTable, TooManyAttempts};
use axum::http::HeaderMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::Failure;

/// The session cookie's name, before the port (`agentflow_session_8700`).
pub const SESSION_COOKIE: &str = "agentflow_session";
/// The login form's CSRF cookie's name (double submit: no session exists yet), before the port.
pub const LOGIN_COOKIE: &str = "agentflow_login";

#[derive(Deserialize)]
struct UsersFile {
    users: Vec<UserEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    token_sha256: Option<String>,
    #[serde(default)]
    roles: Vec<String>,
    /// The tenants whose threads the user sees and acts on; absent: every tenant.
    #[serde(default)]
    tenants: Option<Vec<String>>,
}

/// A configured user.
#[derive(Debug, Clone)]
pub struct User {
    /// The name decisions are recorded under.
    pub name: String,
    /// Hex SHA-256 of the token.
    token_hash: String,
    /// The roles, checked by the authorizer.
    pub roles: Vec<String>,
    /// The tenants the user acts for (`None`: every tenant).
    pub tenants: Option<Vec<String>>,
}

/// A logged-in session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The user.
    pub user: String,
    /// The user's roles.
    pub roles: Vec<String>,
    /// The tenants the user acts for (`None`: every tenant).
    pub tenants: Option<Vec<String>>,
    /// The token every POST of this session must carry.
    pub csrf: String,
}

impl Session {
    /// The user as the access policy and the desk check them: name, roles and tenants.
    pub fn actor(&self) -> agentflow::access::Actor {
        let actor = agentflow::access::Actor::new(self.user.clone(), self.roles.iter().cloned());
        match &self.tenants {
            Some(tenants) => actor.for_tenants(tenants.iter().cloned()),
            None => actor,
        }
    }
}

/// Users, live sessions and failed logins.
pub struct Auth {
    users: Vec<User>,
    sessions: SessionTable<Session>,
    /// How long a session lasts after its login (millis).
    session_ms: u64,
    /// Failed logins per client address.
    attempts: AttemptLimiter,
    /// The session cookie's name (for the port).
    pub session_cookie: String,
    /// The login form's cookie's name (for the port).
    pub login_cookie: String,
}

/// Hex SHA-256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal strings, compared without an early exit.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 random bytes from the operating system, as hex.
pub fn random_token() -> Result<String, Failure> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Failure::store(format!("cannot read random bytes for a session: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The value of cookie `name` in the request, if sent.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

impl Auth {
    /// Reads the users file; every way it can be wrong is a usage error naming the file.
    pub fn load(path: &Path, session_ms: u64, limits: &ServeLimits) -> Result<Auth, Failure> {
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::usage(format!("--users {shown}: cannot read the users file: {e}")))?;
        let file: UsersFile = serde_json::from_str(&text).map_err(|e| {
            Failure::usage(format!(
                "--users {shown}: not a users file ({e}); expected {{\"users\": [{{\"name\": .., \"token_sha256\": .., \
                 \"roles\": [..]}}]}}"
            ))
        })?;
        let mut users = Vec::new();
        for u in file.users {
            if u.token.as_deref().is_some_and(|t| t.trim() != t) {
                return Err(Failure::usage(format!(
                    "--users {shown}: the token of user `{}` starts or ends with spaces, which the login form drops; \
                     remove them",
                    u.name
                )));
            }
            let token_hash = match (u.token, u.token_sha256) {
                (Some(t), None) if !t.is_empty() => sha256_hex(&t),
                (None, Some(h)) if h.eq_ignore_ascii_case(&sha256_hex("")) => {
                    return Err(Failure::usage(format!(
                        "--users {shown}: the token_sha256 of user `{}` is the hash of the empty token (was the \
                         token variable empty when it was hashed?); hash the real token",
                        u.name
                    )));
                }
                (None, Some(h)) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => h.to_ascii_lowercase(),
                _ => {
                    return Err(Failure::usage(format!(
                        "--users {shown}: user `{}` needs exactly one of `token` or `token_sha256` (64 hex digits)",
                        u.name
                    )));
                }
            };
            // Decisions and the audit log show the name: two names a reader cannot tell apart
            // (case, spaces, invisible characters, look-alike letters) could pass as one person
            // or two. The two-person rule compares people by the same key.
            let plain = |c: char| c.is_alphanumeric() || " ._-@+'".contains(c);
            if u.name.trim().is_empty()
                || u.name.trim() != u.name
                || !u.name.chars().all(plain)
                || users.iter().any(|x: &User| person_key(&x.name) == person_key(&u.name))
            {
                return Err(Failure::usage(format!(
                    "--users {shown}: user names must be non-empty, without spaces around them, made of letters, \
                     digits, spaces and . _ - @ + ', and not confusable with one another (equal ignoring case, or \
                     alike to the eye: look-alike letters of another script, fullwidth forms); check {:?}",
                    u.name
                )));
            }
            if users.iter().any(|x: &User| x.token_hash == token_hash) {
                return Err(Failure::usage(format!("--users {shown}: two users have the same token")));
            }
            users.push(User { name: u.name, token_hash, roles: u.roles, tenants: u.tenants });
        }
        if users.is_empty() {
            return Err(Failure::usage(format!("--users {shown}: the file names no user")));
        }
        Ok(Auth {
            users,
            sessions: SessionTable::new(limits.sessions_per_user),
            session_ms,
            attempts: limits.attempt_limiter(),
            session_cookie: SESSION_COOKIE.to_string(),
            login_cookie: LOGIN_COOKIE.to_string(),
        })
    }

    /// Names the cookies for the server's `port`: a browser sends a host's cookies to every
    /// port of it, so two inboxes on one host would otherwise read each other's.
    pub fn name_cookies_for(&mut self, port: u16) {
        self.session_cookie = format!("{SESSION_COOKIE}_{port}");
        self.login_cookie = format!("{LOGIN_COOKIE}_{port}");
    }

    /// Logs in with `token` from client address `from`: a new session id and the session,
    /// `Ok(None)` for an unknown token, or the refusal when `from` made too many failed
    /// attempts (then the token is not even tried).
    pub fn login(
        &self,
        token: &str,
        from: &str,
    ) -> Result<Result<Option<(String, Session)>, TooManyAttempts>, Failure> {
        if let Err(wait) = self.attempts.check(&[from]) {
            return Ok(Err(wait));
        }
        let hash = sha256_hex(token.trim());
        let found = if token.trim().is_empty() { None } else { self.users.iter().find(|u| same(&u.token_hash, &hash)) };
        let Some(user) = found else {
            self.attempts.fail(&[from]);
            return Ok(Ok(None));
        };
        let id = random_token()?;
        let session = Session {
            user: user.name.clone(),
            roles: user.roles.clone(),
            tenants: user.tenants.clone(),
            csrf: random_token()?,
        };
        self.sessions.insert(
            id.clone(),
            &person_key(&user.name),
            session.clone(),
            Duration::from_millis(self.session_ms),
        );
        Ok(Ok(Some((id, session))))
    }

    /// The request's live session, if its cookie names one.
    pub fn session(&self, headers: &HeaderMap) -> Option<Session> {
        self.sessions.get(&cookie(headers, &self.session_cookie)?)
    }

    /// Ends the request's session.
    pub fn logout(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, &self.session_cookie) {
            self.sessions.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_name_and_tokens_compare_exactly() {
        let mut h = HeaderMap::new();
        h.insert(axum::http::header::COOKIE, "a=1; agentflow_session=xyz; b=2".parse().unwrap());
        assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie(&h, LOGIN_COOKIE), None);
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
        assert_eq!(sha256_hex("t").len(), 64);
    }

    fn users_file(name: &str, json: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("agentflow-auth-{}-{name}.json", std::process::id()));
        std::fs::write(&path, json).unwrap();
        path
    }

    fn refusal(name: &str, json: &str) -> String {
        match Auth::load(&users_file(name, json), 60_000, &ServeLimits::default()) {
            Ok(_) => panic!("the users file {json} was accepted"),
            Err(f) => f.message,
        }
    }

    #[test]
    fn a_users_file_with_the_hash_of_the_empty_token_is_refused_and_an_empty_token_never_logs_in() {
        // `printf %s "$TOKEN" | sha256sum` with TOKEN unset gives the hash of "".
        let empty = sha256_hex("");
        let message = refusal("empty", &format!(r#"{{"users": [{{"name": "alice", "token_sha256": "{empty}"}}]}}"#));
        assert!(message.contains("empty token"), "{message}");
        let auth = Auth {
            users: vec![User { name: "alice".into(), token_hash: empty, roles: vec![], tenants: None }],
            sessions: SessionTable::new(8),
            session_ms: 60_000,
            attempts: AttemptLimiter::new(10, Duration::from_secs(6)),
            session_cookie: SESSION_COOKIE.into(),
            login_cookie: LOGIN_COOKIE.into(),
        };
        for token in ["", "  ", "\t\n"] {
            assert!(auth.login(token, "127.0.0.1").unwrap().unwrap().is_none(), "the token {token:?} logged in");
        }
    }

    #[test]
    fn user_names_that_look_alike_and_tokens_with_surrounding_spaces_are_refused() {
        let alike = [
            ("alice", " alice"),
            ("alice", "Alice"),
            ("alice", "alice\\u200b"),
            ("alice", "ali\\nce"),
            // Cyrillic а, Greek ο, fullwidth letters, a zero-width joiner inside the name.
            ("alice", "\\u0430lice"),
            ("bob", "b\\u03bfb"),
            ("alice", "\\uff41\\uff4c\\uff49\\uff43\\uff45"),
            ("alice", "al\\u200dice"),
        ];
        for (i, (a, b)) in alike.iter().enumerate() {
            let json =
                format!(r#"{{"users": [{{"name": "{a}", "token": "one"}}, {{"name": "{b}", "token": "two"}}]}}"#);
            let message = refusal(&format!("alike{i}"), &json);
            assert!(message.contains("user names"), "{json}: {message}");
        }
        let message = refusal("spaces", r#"{"users": [{"name": "alice", "token": " secret "}]}"#);
        assert!(message.contains("spaces"), "{message}");
        // Distinct, plain names are fine.
        let ok = users_file("ok", r#"{"users": [{"name": "alice", "token": "one"}, {"name": "bob", "token": "two"}]}"#);
        assert!(Auth::load(&ok, 60_000, &ServeLimits::default()).is_ok());
    }
}
