//! The users file: who may use the server, with which token, roles and tenants, and which OS
//! account each uses on this machine. Loaded once, when the server starts.
//!
//! The file is JSON:
//!
//! ```json
//! { "users": [
//!     { "name": "alice", "token_sha256": "<hex SHA-256 of her token>", "roles": ["irreversible"],
//!       "tenants": ["acme"], "os_user": "alice" },
//!     { "name": "bob", "token": "a-plain-token", "roles": [] }
//! ] }
//! ```
//!
//! `token_sha256` keeps the file free of the secret (`printf %s TOKEN | sha256sum`); `token`
//! (plain) is accepted for local trials. `roles` are checked by the approval authorizer and
//! by the access policy; `tenants` (optional; absent: every tenant) lists the tenants whose
//! threads the user sees and acts on. `os_user` (optional) names the OS account the person
//! uses on this machine: a program of that account reaching the server through its Unix
//! socket acts as this user (no two users may name the same account). The socket has mode
//! 0600, so only the server's own OS account (and root) can connect to it: `os_user` maps that
//! account, or `root`, to a person; other accounts reach the server over HTTP with a token.
//!
//! A file is refused when a `token_sha256` is the hash of the empty token, a plain token has
//! spaces around it, two users have the same token, or two user names could be taken for one
//! another (equal ignoring case, or confusable under Unicode's skeleton rules: `alice` and
//! `аlice` with a Cyrillic a, fullwidth `ａlice`; spaces around; characters other than
//! letters, digits, spaces and `. _ - @ + '`): decisions and the audit log show the name, and
//! the two-person rule compares people by it. An empty token never matches.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::error::ServerError;
use crate::access::Actor;
use crate::approval::person_key;

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
    #[serde(default)]
    tenants: Option<Vec<String>>,
    #[serde(default)]
    os_user: Option<String>,
}

/// A user of the server, as the users file names them.
#[derive(Clone)]
#[non_exhaustive]
pub struct User {
    /// The name decisions and audit entries are recorded under.
    pub name: String,
    /// Hex SHA-256 of the token (lowercase).
    token_hash: String,
    /// The roles, checked by the approval authorizer and the access policy.
    pub roles: Vec<String>,
    /// The tenants the user acts for (`None`: every tenant).
    pub tenants: Option<Vec<String>>,
    /// The OS account this person uses on this machine, if the file names one: a program of it
    /// connecting to the server's owner socket acts as this person. The socket has mode 0600,
    /// so only the server's own OS account (and root) can connect: this maps that account (or
    /// `root`) to a person.
    pub os_user: Option<String>,
}

impl std::fmt::Debug for User {
    /// Without the token's hash.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("roles", &self.roles)
            .field("tenants", &self.tenants)
            .field("os_user", &self.os_user)
            .finish_non_exhaustive()
    }
}

impl User {
    /// The user as the access policy and the approval desk check them: name, roles and tenants.
    pub fn actor(&self) -> Actor {
        actor_of(&self.name, &self.roles, self.tenants.as_deref())
    }
}

/// A person as an actor: `name` with `roles`, acting for `tenants` (`None`: every tenant).
pub(crate) fn actor_of(name: &str, roles: &[String], tenants: Option<&[String]>) -> Actor {
    let actor = Actor::new(name, roles.iter().cloned());
    match tenants {
        Some(tenants) => actor.for_tenants(tenants.iter().cloned()),
        None => actor,
    }
}

/// The users of a server, loaded once from the users file (share it as `Arc<Users>`).
#[derive(Debug)]
pub struct Users {
    users: Vec<User>,
}

/// Hex SHA-256 of `text`.
pub(crate) fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal strings, compared without an early exit on the first differing byte.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Users {
    /// Reads the users file at `path`; every way it can be wrong is [`ServerError::Users`],
    /// saying what to fix.
    pub fn load(path: &Path) -> Result<Users, ServerError> {
        let refuse = |reason: String| ServerError::Users { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| refuse(format!("cannot read the users file: {e}")))?;
        Users::parse(&text).map_err(refuse)
    }

    /// The users of a users file's text; `Err` says what is wrong with it.
    fn parse(text: &str) -> Result<Users, String> {
        let file: UsersFile = serde_json::from_str(text).map_err(|e| {
            format!(
                "not a users file ({e}); expected {{\"users\": [{{\"name\": .., \"token_sha256\": .., \"roles\": \
                 [..]}}]}}"
            )
        })?;
        let mut users: Vec<User> = Vec::new();
        for u in file.users {
            if u.token.as_deref().is_some_and(|t| t.trim() != t) {
                return Err(format!(
                    "the token of user `{}` starts or ends with spaces, which the login form drops; remove them",
                    u.name
                ));
            }
            let token_hash = match (u.token, u.token_sha256) {
                (Some(t), None) if !t.is_empty() => sha256_hex(&t),
                (None, Some(h)) if h.eq_ignore_ascii_case(&sha256_hex("")) => {
                    return Err(format!(
                        "the token_sha256 of user `{}` is the hash of the empty token (was the token variable \
                         empty when it was hashed?); hash the real token",
                        u.name
                    ));
                }
                (None, Some(h)) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => h.to_ascii_lowercase(),
                _ => {
                    return Err(format!(
                        "user `{}` needs exactly one of `token` or `token_sha256` (64 hex digits)",
                        u.name
                    ));
                }
            };
            // Decisions and the audit log show the name: two names a reader cannot tell apart
            // (case, spaces, invisible characters, look-alike letters) could pass as one person
            // or two. The two-person rule compares people by the same key.
            let plain = |c: char| c.is_alphanumeric() || " ._-@+'".contains(c);
            if u.name.trim().is_empty()
                || u.name.trim() != u.name
                || !u.name.chars().all(plain)
                || users.iter().any(|x| person_key(&x.name) == person_key(&u.name))
            {
                return Err(format!(
                    "user names must be non-empty, without spaces around them, made of letters, digits, spaces and \
                     . _ - @ + ', and not confusable with one another (equal ignoring case, or alike to the eye: \
                     look-alike letters of another script, fullwidth forms); check {:?}",
                    u.name
                ));
            }
            if users.iter().any(|x| x.token_hash == token_hash) {
                return Err("two users have the same token".to_string());
            }
            if let Some(os_user) = &u.os_user {
                if os_user.is_empty() || os_user.trim() != os_user || os_user.contains(['/', ':', '\0']) {
                    return Err(format!(
                        "the os_user of user `{}` is {os_user:?}, which is no OS account name; write the account's \
                         name as `id -un` prints it, or leave `os_user` out",
                        u.name
                    ));
                }
                if let Some(other) = users.iter().find(|x| x.os_user.as_deref() == Some(os_user.as_str())) {
                    return Err(format!(
                        "users `{}` and `{}` both name the OS account `{os_user}`: a program of that account could \
                         not be told to be one or the other; give `os_user` to one of them only",
                        other.name, u.name
                    ));
                }
            }
            users.push(User { name: u.name, token_hash, roles: u.roles, tenants: u.tenants, os_user: u.os_user });
        }
        if users.is_empty() {
            return Err("the file names no user; add one".to_string());
        }
        Ok(Users { users })
    }

    /// The user whose token is `token` (spaces around it dropped, compared by hash without an
    /// early exit); `None` for an unknown or empty token.
    pub fn by_token(&self, token: &str) -> Option<&User> {
        let token = token.trim();
        if token.is_empty() {
            return None;
        }
        let hash = sha256_hex(token);
        self.users.iter().find(|u| same(&u.token_hash, &hash))
    }

    /// The user whose `os_user` is `os_user`, if any.
    pub fn by_os_user(&self, os_user: &str) -> Option<&User> {
        self.users.iter().find(|u| u.os_user.as_deref() == Some(os_user))
    }

    /// Every user, in the file's order.
    pub fn iter(&self) -> impl Iterator<Item = &User> {
        self.users.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly_and_hash_to_hex() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
        assert_eq!(sha256_hex("t").len(), 64);
    }

    fn refusal(json: &str) -> String {
        match Users::parse(json) {
            Ok(_) => panic!("the users file {json} was accepted"),
            Err(message) => message,
        }
    }

    #[test]
    fn a_users_file_with_the_hash_of_the_empty_token_is_refused_and_an_empty_token_never_matches() {
        // `printf %s "$TOKEN" | sha256sum` with TOKEN unset gives the hash of "".
        let empty = sha256_hex("");
        let message = refusal(&format!(r#"{{"users": [{{"name": "alice", "token_sha256": "{empty}"}}]}}"#));
        assert!(message.contains("empty token"), "{message}");
        let users = Users {
            users: vec![User { name: "alice".into(), token_hash: empty, roles: vec![], tenants: None, os_user: None }],
        };
        for token in ["", "  ", "\t\n"] {
            assert!(users.by_token(token).is_none(), "the token {token:?} matched");
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
        for (a, b) in alike {
            let json =
                format!(r#"{{"users": [{{"name": "{a}", "token": "one"}}, {{"name": "{b}", "token": "two"}}]}}"#);
            let message = refusal(&json);
            assert!(message.contains("user names"), "{json}: {message}");
        }
        let message = refusal(r#"{"users": [{"name": "alice", "token": " secret "}]}"#);
        assert!(message.contains("spaces"), "{message}");
        // Distinct, plain names are fine.
        let ok = Users::parse(r#"{"users": [{"name": "alice", "token": "one"}, {"name": "bob", "token": "two"}]}"#);
        assert!(ok.is_ok());
    }

    #[test]
    fn users_are_found_by_token_and_by_os_account() {
        let users = Users::parse(
            r#"{"users": [
                {"name": "alice", "token": "one", "roles": ["ops"], "tenants": ["acme"], "os_user": "alice"},
                {"name": "bob", "token": "two"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(users.by_token(" one ").map(|u| u.name.as_str()), Some("alice"));
        assert_eq!(users.by_token("two").map(|u| u.name.as_str()), Some("bob"));
        assert!(users.by_token("three").is_none());
        let alice = users.by_os_user("alice").unwrap();
        assert_eq!(alice.name, "alice");
        assert!(users.by_os_user("bob").is_none(), "bob names no OS account");
        let actor = alice.actor();
        assert_eq!((actor.id.as_str(), actor.roles.clone()), ("alice", vec!["ops".to_string()]));
        assert!(format!("{alice:?}").contains("alice") && !format!("{alice:?}").contains(&sha256_hex("one")));
    }

    #[test]
    fn two_users_naming_one_os_account_are_refused() {
        let message = refusal(
            r#"{"users": [{"name": "alice", "token": "one", "os_user": "ops"},
                          {"name": "bob", "token": "two", "os_user": "ops"}]}"#,
        );
        assert!(message.contains("`alice` and `bob` both name the OS account `ops`"), "{message}");
        let message = refusal(r#"{"users": [{"name": "alice", "token": "one", "os_user": " ops"}]}"#);
        assert!(message.contains("no OS account name"), "{message}");
    }

    #[test]
    fn a_users_file_that_cannot_be_read_names_the_file() {
        let path = std::env::temp_dir().join(format!("agentflow-users-missing-{}.json", std::process::id()));
        let message = Users::load(&path).unwrap_err().to_string();
        assert!(message.contains(&path.display().to_string()) && message.contains("cannot read"), "{message}");
    }
}
