//! Logging in to the server's pages: sessions started with a users file's token, their cookie,
//! and the CSRF token every state-changing request of a session carries.
//!
//! Logging in with a token starts a session: a random id in an `HttpOnly; SameSite=Strict`
//! cookie named for the server's port (`agentflow_session_8700`: a browser sends a host's
//! cookies to every port of it, so two servers on one host keep their sessions apart), and a
//! random CSRF token that every form of the session carries and every POST must send back.
//! Sessions live in the server's memory for the session lifetime the server is given (a
//! restart logs everyone out), at most [`ServeLimits::sessions_per_user`] a user (a new login
//! ends the oldest). Failed logins are limited per client address
//! ([`ServeLimits::login_attempts`]), together with the wrong bearer tokens the JSON API is sent
//! from that address; the login asks for a token only, so a wrong one names no user.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, header};

use super::users::{Users, actor_of, same};
use crate::access::Actor;
use crate::approval::person_key;
use crate::serve_limits::{AttemptLimiter, ServeLimits, SessionTable, TooManyAttempts};

/// The session cookie's name, before the port (`agentflow_session_8700`).
pub const SESSION_COOKIE: &str = "agentflow_session";
/// The login form's CSRF cookie's name (double submit: no session exists yet), before the port.
pub const LOGIN_COOKIE: &str = "agentflow_login";

/// A logged-in session.
#[derive(Clone)]
#[non_exhaustive]
pub struct Session {
    /// The user's name (as the users file gives it).
    pub user: String,
    /// The user's roles.
    pub roles: Vec<String>,
    /// The tenants the user acts for (`None`: every tenant).
    pub tenants: Option<Vec<String>>,
    /// The token every state-changing request of this session must carry.
    pub csrf: String,
}

impl std::fmt::Debug for Session {
    /// Without the CSRF token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("user", &self.user)
            .field("roles", &self.roles)
            .field("tenants", &self.tenants)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The user as the access policy and the desk check them: name, roles and tenants.
    pub fn actor(&self) -> Actor {
        actor_of(&self.user, &self.roles, self.tenants.as_deref())
    }

    /// Whether `sent` is this session's CSRF token (compared without an early exit).
    pub fn csrf_matches(&self, sent: &str) -> bool {
        same(sent, &self.csrf)
    }
}

/// Whether a request's `Origin` names another site than its `Host`: such a state-changing
/// request is refused whatever it carries (browsers send `Origin` on posts; `null`, sent from
/// privacy-restricted contexts, names none, and the CSRF token decides).
pub(crate) fn cross_site(headers: &HeaderMap) -> bool {
    let (Some(origin), Some(host)) = (
        headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        headers.get(header::HOST).and_then(|v| v.to_str().ok()),
    ) else {
        return false;
    };
    if origin == "null" {
        return false;
    }
    origin.split_once("://").map_or(origin, |(_, rest)| rest) != host
}

/// What a login came to.
pub(crate) enum Login {
    /// A new session, and its id (the cookie's value).
    Started(String),
    /// No user has this token.
    UnknownToken,
    /// The client address made too many failed attempts: the token was not even tried.
    TooMany(TooManyAttempts),
}

/// The users, their live sessions and the failed logins of a server.
pub struct Auth {
    users: Arc<Users>,
    sessions: SessionTable<Session>,
    session_ttl: Duration,
    attempts: Arc<AttemptLimiter>,
    session_cookie: String,
    login_cookie: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("session_cookie", &self.session_cookie).finish_non_exhaustive()
    }
}

/// 32 random bytes from the operating system, as hex.
pub(crate) fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The value of cookie `name` in the request, if sent.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
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
    /// Sessions for `users` that last `session_ttl` after their login, within `limits`' login
    /// attempts and sessions per user. The cookies are named [`SESSION_COOKIE`] and
    /// [`LOGIN_COOKIE`] until [`Auth::for_port`] names them for the server's port.
    pub fn new(users: Arc<Users>, session_ttl: Duration, limits: &ServeLimits) -> Auth {
        Auth {
            users,
            sessions: SessionTable::new(limits.sessions_per_user),
            session_ttl,
            attempts: Arc::new(limits.attempt_limiter()),
            session_cookie: SESSION_COOKIE.to_string(),
            login_cookie: LOGIN_COOKIE.to_string(),
        }
    }

    /// Names the cookies for the server's `port` (`agentflow_session_8700`): a browser sends a
    /// host's cookies to every port of it, so two servers on one host would otherwise read each
    /// other's.
    pub fn for_port(mut self, port: u16) -> Auth {
        self.session_cookie = format!("{SESSION_COOKIE}_{port}");
        self.login_cookie = format!("{LOGIN_COOKIE}_{port}");
        self
    }

    /// The failed attempts per client address: wrong tokens at the login and at the JSON API
    /// count together.
    pub(crate) fn attempts(&self) -> &Arc<AttemptLimiter> {
        &self.attempts
    }

    /// The users.
    pub fn users(&self) -> &Arc<Users> {
        &self.users
    }

    /// The session cookie's name.
    pub fn session_cookie(&self) -> &str {
        &self.session_cookie
    }

    /// The login form's cookie's name.
    pub(crate) fn login_cookie(&self) -> &str {
        &self.login_cookie
    }

    /// Logs in with `token` from client address `from`: a new session, an unknown token, or
    /// the refusal when `from` made too many failed attempts. `Err` when no random session id
    /// can be made.
    pub(crate) fn login(&self, token: &str, from: &str) -> std::io::Result<Login> {
        if let Err(wait) = self.attempts.check(&[from]) {
            return Ok(Login::TooMany(wait));
        }
        let Some(user) = self.users.by_token(token) else {
            self.attempts.fail(&[from]);
            return Ok(Login::UnknownToken);
        };
        let id = random_token()?;
        let session = Session {
            user: user.name.clone(),
            roles: user.roles.clone(),
            tenants: user.tenants.clone(),
            csrf: random_token()?,
        };
        self.sessions.insert(id.clone(), &person_key(&user.name), session, self.session_ttl);
        Ok(Login::Started(id))
    }

    /// The request's live session, if its session cookie names one.
    pub fn session(&self, headers: &HeaderMap) -> Option<Session> {
        self.sessions.get(&cookie(headers, &self.session_cookie)?)
    }

    /// Ends the request's session.
    pub(crate) fn logout(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, &self.session_cookie) {
            self.sessions.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_name() {
        let mut h = HeaderMap::new();
        h.insert(axum::http::header::COOKIE, "a=1; agentflow_session=xyz; b=2".parse().unwrap());
        assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie(&h, LOGIN_COOKIE), None);
    }

    fn auth() -> Auth {
        let path = std::env::temp_dir().join(format!(
            "agentflow-auth-{}-{}.json",
            std::process::id(),
            crate::server::test_file_number()
        ));
        std::fs::write(&path, r#"{"users": [{"name": "alice", "token": "one", "roles": ["ops"]}]}"#).unwrap();
        let users = Arc::new(Users::load(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        Auth::new(users, Duration::from_secs(60), &ServeLimits::default()).for_port(8700)
    }

    #[test]
    fn a_login_starts_a_session_its_cookie_finds_and_a_logout_ends() {
        let auth = auth();
        assert_eq!(auth.session_cookie(), "agentflow_session_8700");
        let Ok(Login::Started(id)) = auth.login("one", "127.0.0.1") else { panic!("alice did not log in") };
        let mut h = HeaderMap::new();
        h.insert(axum::http::header::COOKIE, format!("agentflow_session_8700={id}").parse().unwrap());
        let session = auth.session(&h).expect("the session");
        assert_eq!((session.user.as_str(), session.actor().roles), ("alice", vec!["ops".to_string()]));
        assert!(session.csrf_matches(&session.csrf.clone()) && !session.csrf_matches("forged"));
        assert!(!format!("{session:?}").contains(&session.csrf), "the CSRF token stays out of logs");
        auth.logout(&h);
        assert!(auth.session(&h).is_none());
        assert!(matches!(auth.login("two", "127.0.0.1"), Ok(Login::UnknownToken)));
    }

    #[test]
    fn an_origin_of_another_host_is_cross_site_and_a_missing_or_null_one_is_not() {
        let with = |origin: Option<&str>| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, "127.0.0.1:8700".parse().unwrap());
            if let Some(origin) = origin {
                h.insert(header::ORIGIN, origin.parse().unwrap());
            }
            cross_site(&h)
        };
        assert!(!with(Some("http://127.0.0.1:8700")));
        assert!(with(Some("http://127.0.0.1:8701")));
        assert!(with(Some("https://evil.example")));
        assert!(!with(Some("null")), "`null` names no site: the CSRF token decides");
        assert!(!with(None));
    }
}
