//! Users, login, sessions and CSRF tokens.
//!
//! The users file is JSON:
//!
//! ```json
//! { "users": [
//!     { "name": "alice", "token_sha256": "<hex SHA-256 of her token>", "roles": ["irreversible"] },
//!     { "name": "bob", "token": "a-plain-token", "roles": [] }
//! ] }
//! ```
//!
//! `token_sha256` keeps the file free of the secret (`printf %s TOKEN | sha256sum`); `token`
//! (plain) is accepted for local trials. A file is refused when a `token_sha256` is the hash
//! of the empty token, a plain token has spaces around it, or two user names could be taken
//! for one another (equal ignoring case; spaces around; characters other than letters,
//! digits, spaces and `. _ - @ + '`). An empty token never logs in. Logging in with a token starts a session: a random
//! id in an `HttpOnly; SameSite=Strict` cookie, and a random CSRF token that every form of the
//! session carries and every POST must send back. Sessions live in the server's memory for
//! 12 hours unless `--session-ttl` says otherwise (a restart logs everyone out).

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use axum::http::HeaderMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::Failure;
use crate::out::now_ms;

/// The session cookie.
pub const SESSION_COOKIE: &str = "agentflow_session";
/// The login form's CSRF cookie (double submit: no session exists yet).
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
}

/// A logged-in session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The user.
    pub user: String,
    /// The user's roles.
    pub roles: Vec<String>,
    /// The token every POST of this session must carry.
    pub csrf: String,
    expires_at: u64,
}

/// Users and live sessions.
pub struct Auth {
    users: Vec<User>,
    sessions: Mutex<HashMap<String, Session>>,
    /// How long a session lasts after its login (millis).
    session_ms: u64,
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
    pub fn load(path: &Path, session_ms: u64) -> Result<Auth, Failure> {
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
            // (case, spaces, invisible characters) could pass as one person or two.
            let plain = |c: char| c.is_alphanumeric() || " ._-@+'".contains(c);
            if u.name.trim().is_empty()
                || u.name.trim() != u.name
                || !u.name.chars().all(plain)
                || users.iter().any(|x: &User| x.name.to_lowercase() == u.name.to_lowercase())
            {
                return Err(Failure::usage(format!(
                    "--users {shown}: user names must be non-empty, distinct ignoring case, without spaces around \
                     them, and made of letters, digits, spaces and . _ - @ + ' (check {:?})",
                    u.name
                )));
            }
            if users.iter().any(|x: &User| x.token_hash == token_hash) {
                return Err(Failure::usage(format!("--users {shown}: two users have the same token")));
            }
            users.push(User { name: u.name, token_hash, roles: u.roles });
        }
        if users.is_empty() {
            return Err(Failure::usage(format!("--users {shown}: the file names no user")));
        }
        Ok(Auth { users, sessions: Mutex::new(HashMap::new()), session_ms })
    }

    /// Logs in with `token`: a new session id and the session, or `None` for an unknown token.
    pub fn login(&self, token: &str) -> Result<Option<(String, Session)>, Failure> {
        if token.trim().is_empty() {
            return Ok(None);
        }
        let hash = sha256_hex(token.trim());
        let Some(user) = self.users.iter().find(|u| same(&u.token_hash, &hash)) else { return Ok(None) };
        let id = random_token()?;
        let session = Session {
            user: user.name.clone(),
            roles: user.roles.clone(),
            csrf: random_token()?,
            expires_at: now_ms().saturating_add(self.session_ms),
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_ms();
        sessions.retain(|_, s| s.expires_at > now);
        sessions.insert(id.clone(), session.clone());
        Ok(Some((id, session)))
    }

    /// The request's live session, if its cookie names one.
    pub fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, SESSION_COOKIE)?;
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(&id).filter(|s| s.expires_at > now_ms()).cloned()
    }

    /// Ends the request's session.
    pub fn logout(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, SESSION_COOKIE) {
            self.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
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
        match Auth::load(&users_file(name, json), 60_000) {
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
            users: vec![User { name: "alice".into(), token_hash: empty, roles: vec![] }],
            sessions: Mutex::new(HashMap::new()),
            session_ms: 60_000,
        };
        for token in ["", "  ", "\t\n"] {
            assert!(auth.login(token).unwrap().is_none(), "the token {token:?} logged in");
        }
    }

    #[test]
    fn user_names_that_look_alike_and_tokens_with_surrounding_spaces_are_refused() {
        let alike = [("alice", " alice"), ("alice", "Alice"), ("alice", "alice\\u200b"), ("alice", "ali\\nce")];
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
        assert!(Auth::load(&ok, 60_000).is_ok());
    }
}
