//! The credential scan's table: the shapes it must find (with their pointer), the look-alikes it
//! must pass, and its speed.

use super::*;
use serde_json::json;

const OPENAI: &str = "sk-proj-4fT9xQ2mL7vN1cB8zR5kW3yH6jD0sA2eG9uP4iO7tY1rE5wQ";
const OPENAI_OLD: &str = "sk-3kD9fJ2mQ8xL5vN7cB1zR4tW6yH0sA9eG2uP5iO8tY3rE7wQ";
const ANTHROPIC: &str = "sk-ant-api03-Zk9fJ2mQ8xL5vN7cB1zR4tW6yH0sA9eG2uP5iO8tY3rE7wQ-aB";
const AWS: &str = "AKIAZ3MHQ7XK2V5RW4PB";
const AWS_SESSION: &str = "ASIAY34FZKBOKMUTVV7A";
const GITHUB: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
const GITHUB_FINE: &str = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz";
const SLACK: &str = "xoxb-2048123456-4096123456789-AbCdEfGhIjKlMnOpQrStUvWx";
const STRIPE: &str = "sk_live_51H8aBcDeFgHiJkLmNoPqRsTu";
const STRIPE_RESTRICTED: &str = "rk_live_51H8aBcDeFgHiJkLmNoPqRsTu";
const GOOGLE: &str = "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q";
// {"alg":"HS256","typ":"JWT"} . {"sub":"1234567890","name":"John Doe","iat":1516239022} . signature
const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
                   eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.\
                   SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----";
const PEM_PLAIN: &str = "-----BEGIN PRIVATE KEY-----\r\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----";
const BEARER: &str = "Authorization: Bearer 8f14e45fCEEA167a5a36dedd4bea2543-tok";
const SLACK_APP: &str = "xapp-1-A0123BCDEFG-1234567890123-0a1b2c3d4e5f6a7b8c9d";
const SLACK_REFRESH: &str = "xoxe.xoxp-1-Mi0yLTEyMzQ1Njc4OTAtMTIzNDU2Nzg5MA";
const SLACK_EXPIRING: &str = "xoxe-1-My0xLTEyMzQ1Njc4OTAtMTIzNDU2Nzg5MA";
// The key the Stripe documentation shows in its examples: a real test-mode key's shape.
const STRIPE_DOCS: &str = "curl -H \"Authorization: Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc\"";

#[test]
fn the_shapes_are_found_with_their_pointer() {
    let table: Vec<(Value, &str, CredentialKind)> = vec![
        (json!({"api_key": OPENAI}), "/api_key", CredentialKind::OpenAi),
        (json!({"k": [1, OPENAI_OLD]}), "/k/1", CredentialKind::OpenAi),
        (
            json!({"messages": [{}, {}, {}, {"content": format!("here is my key {ANTHROPIC} thanks")}]}),
            "/messages/3/content",
            CredentialKind::Anthropic,
        ),
        (json!({"aws": {"id": AWS}}), "/aws/id", CredentialKind::AwsAccessKey),
        (json!([format!("creds:{AWS_SESSION}.")]), "/0", CredentialKind::AwsAccessKey),
        (json!({"t": format!("token={GITHUB}")}), "/t", CredentialKind::GitHub),
        (json!({"t": GITHUB_FINE}), "/t", CredentialKind::GitHub),
        (json!({"slack": SLACK}), "/slack", CredentialKind::Slack),
        (json!({"a/b": STRIPE}), "/a~1b", CredentialKind::Stripe),
        (json!({"m~x": STRIPE_RESTRICTED}), "/m~0x", CredentialKind::Stripe),
        (json!({"maps": {"key": GOOGLE}}), "/maps/key", CredentialKind::GoogleApiKey),
        (json!({"session": format!("cookie {JWT}")}), "/session", CredentialKind::Jwt),
        (json!({"pem": PEM}), "/pem", CredentialKind::PemPrivateKey),
        (json!({"pem": PEM_PLAIN}), "/pem", CredentialKind::PemPrivateKey),
        (json!({"headers": {"auth": BEARER}}), "/headers/auth", CredentialKind::BearerToken),
        (json!({"h": "bearer abcdefghij0123456789XYZ"}), "/h", CredentialKind::BearerToken),
        // A credential as a key is not quoted in the pointer.
        (json!({"ok": {OPENAI: 1}}), "/ok/{key}", CredentialKind::OpenAi),
        (json!({"sk-proj-x": {"a": STRIPE}}), "/sk-proj-x/a", CredentialKind::Stripe),
        (json!({"t": STRIPE_DOCS}), "/t", CredentialKind::BearerToken),
        (json!({"t": "sk_test_4eC39HqLyjWDarjtT1zdp7dc"}), "/t", CredentialKind::Stripe),
        // A truncated bearer header from documentation still has a random-looking body.
        (json!({"t": "Authorization: Bearer eyJhbGciOiJIUzI1NiIs..."}), "/t", CredentialKind::BearerToken),
        (json!({"t": format!("Bearer\t{}", &BEARER[22..])}), "/t", CredentialKind::BearerToken),
        (json!({"t": format!("Bearer\r\n  {}", &BEARER[22..])}), "/t", CredentialKind::BearerToken),
        (json!({"t": format!("Bearer%20{}", &BEARER[22..])}), "/t", CredentialKind::BearerToken),
        (
            json!({"url": format!("https://x.test/?token={}", OPENAI.replace('-', "%2D"))}),
            "/url",
            CredentialKind::OpenAi,
        ),
        (json!({"t": format!("ghp%5F{}", &GITHUB[4..])}), "/t", CredentialKind::GitHub),
        (json!({"t": SLACK_APP}), "/t", CredentialKind::Slack),
        (json!({"t": SLACK_REFRESH}), "/t", CredentialKind::Slack),
        (json!({"t": SLACK_EXPIRING}), "/t", CredentialKind::Slack),
        (json!({"t": format!("{GOOGLE}-extra")}), "/t", CredentialKind::GoogleApiKey),
        (json!({"t": format!("key={GOOGLE}Zz9")}), "/t", CredentialKind::GoogleApiKey),
        (json!({"t": "sk-svcacct-Ab3dE5gH7jK9mN1pQ3sT5vX7zA2cE4gI6kM8oQ0sU2wY4-x_Z"}), "/t", CredentialKind::OpenAi),
        (
            json!({"t": "-----BEGIN ENCRYPTED PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED"}),
            "/t",
            CredentialKind::PemPrivateKey,
        ),
        (Value::String(OPENAI.to_string()), "", CredentialKind::OpenAi),
    ];
    assert!(table.len() >= 10);
    for (value, pointer, kind) in table {
        let hit = scan_value(&value).unwrap_or_else(|| panic!("not found in {value}"));
        assert_eq!((hit.pointer.as_str(), hit.kind), (pointer, kind), "in {value}");
        // The fast pass over the serialised text never misses what the walk finds.
        assert!(scan_json_text(&serde_json::to_vec(&value).unwrap()), "fast pass missed {value}");
    }
}

#[test]
fn look_alikes_pass() {
    let prose = [
        "task-sk-list, disk-sk-cache",
        "use sk-learn for the model",
        "the AKIABOOKS catalogue, TAKIAIOSFODNN7EXAMPLE and AKIAIOSFODNN7EXAMPLEX",
        "123e4567-e89b-12d3-a456-426614174000",
        "Bearer of bad news",
        "the bearer token is in the vault",
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
        "e83c5163316f89bfbde7d9ab23ca2e25604af290",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n-----END PUBLIC KEY-----",
        "AIzaShort and ghp_short and xoxb-notatoken",
        "eyJhbGciOi only one part",
        // Three base64url parts whose header is not JSON with `alg`.
        "eyJub3RhbGciOiJ4In0.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36",
        "sk_live_short",
        "a plain message about keys, tokens and the risk of leaking them",
        // Found by review as false positives.
        "sk-ii-facial-treatment-essence-230ml-refill",
        "the bearer 2nd-class-citizens-of-the-realm walked",
        "AKIAIOSFODNN7EXAMPLE",
        "aws_access_key_id = ASIAIOSFODNN7EXAMPLE",
        "ghp_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
        "github_pat_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
        "xoxb-xxxxxxxxxxxx-xxxxxxxxxxxxx-xxxxxxxxxxxxxxxxxxxxxxxx",
        "-----BEGIN RSA PRIVATE KEY-----\n...\n-----END RSA PRIVATE KEY-----",
        // A legacy key has mixed case and digits, no dashes; a project key 40 characters.
        "sk-0123456789abcdef0123456789abcdef01234567",
        "sk-proj-not-a-real-key-just-a-slug",
        // A bearer body needs mixed case and a digit: an all-lowercase hex token passes (a gap).
        "Bearer 8f14e45fceea167a5a36dedd4bea2543",
        "100%2D200 and 50%5Fx",
    ];
    for text in prose {
        assert_eq!(scan_str(text), None, "flagged {text:?}");
        let value = json!({"messages": [{"content": text}]});
        assert_eq!(scan_value(&value), None, "flagged {text:?}");
    }
}

#[test]
fn an_escape_before_a_token_does_not_hide_it_from_the_fast_pass() {
    for sep in ["\n", "\t", "\u{1f}", "\"", "\\"] {
        let value = json!({"m": format!("line{sep}{OPENAI}")});
        assert!(scan_value(&value).is_some(), "walk missed after {sep:?}");
        assert!(scan_json_text(&serde_json::to_vec(&value).unwrap()), "fast pass missed after {sep:?}");
    }
}

#[test]
fn skipped_pointers_are_left_out() {
    let value = json!({"token": OPENAI, "update": {"token": OPENAI}, "other": "x"});
    assert_eq!(scan_value_skipping(&value, &["/token".into(), "/update/token".into()]), None);
    let hit = scan_value_skipping(&value, &["/token".into()]).unwrap();
    assert_eq!(hit.pointer, "/update/token");
}

#[test]
fn a_credential_in_a_key_is_not_quoted_by_the_pointer() {
    let keys = [OPENAI, ANTHROPIC, GITHUB, SLACK, JWT, "a/sk-proj-4fT9xQ2mL7vN1cB8zR5kW3yH6jD0sA2eG9uP4iO7tY1rE5wQ"];
    for key in keys {
        let table = [
            (json!({ key: 1 }), "/{key}".to_string()),
            (json!({"tokens": { key: "user 7" }}), "/tokens/{key}".to_string()),
            (json!([{"cache": { key: {"n": 1}}}]), "/0/cache/{key}".to_string()),
        ];
        for (value, pointer) in table {
            let hit = scan_value(&value).unwrap_or_else(|| panic!("not found: {value}"));
            assert_eq!(hit.pointer, pointer);
            assert!(!hit.pointer.contains(&key[4..]), "{} quotes the key", hit.pointer);
        }
    }
    // A hit below a key that is not a credential names the key.
    let hit = scan_value(&json!({"users": {"ada": OPENAI}})).unwrap();
    assert_eq!(hit.pointer, "/users/ada");
}

#[test]
fn a_hit_does_not_carry_the_value() {
    let hit = scan_value(&json!({"k": OPENAI})).unwrap();
    assert!(!format!("{hit:?}").contains(OPENAI));
}

/// A figure, not a limit: `cargo test -p agentflow-runtime --lib credential_scan -- --ignored --nocapture`.
#[test]
#[ignore = "timing"]
fn fast_pass_speed() {
    let messages: Vec<Value> = (0..40)
        .map(|i| {
            json!({"role": if i % 2 == 0 { "user" } else { "assistant" },
                   "content": format!("Message {i}: the customer asks about the refund of order {i}, \
                   shipped to Berlin; the assistant checks the basket, the tracking number and the task list.")})
        })
        .collect();
    let text = serde_json::to_vec(&json!({"messages": messages, "intent": "refund"})).unwrap();
    let rounds = 20_000;
    let began = std::time::Instant::now();
    for _ in 0..rounds {
        assert!(!scan_json_text(std::hint::black_box(&text)));
    }
    let per_kb = began.elapsed().as_secs_f64() * 1e6 / f64::from(rounds) / (text.len() as f64 / 1024.0);
    let value: Value = serde_json::from_slice(&text).unwrap();
    let began = std::time::Instant::now();
    for _ in 0..rounds {
        assert!(scan_value(std::hint::black_box(&value)).is_none());
    }
    let walk_per_kb = began.elapsed().as_secs_f64() * 1e6 / f64::from(rounds) / (text.len() as f64 / 1024.0);
    let line = std::str::from_utf8(&text).unwrap();
    let began = std::time::Instant::now();
    for _ in 0..rounds {
        assert!(matches!(crate::secret::redact_credentials(std::hint::black_box(line)), std::borrow::Cow::Borrowed(_)));
    }
    let redact_per_kb = began.elapsed().as_secs_f64() * 1e6 / f64::from(rounds) / (text.len() as f64 / 1024.0);
    println!(
        "{} bytes: fast pass {per_kb:.3} µs/KB, value walk {walk_per_kb:.3} µs/KB, redact {redact_per_kb:.3} µs/KB",
        text.len()
    );
}
