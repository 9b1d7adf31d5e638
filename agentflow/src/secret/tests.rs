//! `Secret<T>` and the secret stores: masked printing, the reference-only serde form, the
//! schema, references refused, and the built-in stores.

use super::*;
use serde_json::json;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
}

#[test]
fn a_secret_prints_only_its_reference() {
    let s: Secret = Secret::reference("env:OPENAI_KEY").unwrap();
    assert_eq!(format!("{s:?}"), "•••(env:OPENAI_KEY)");
    assert_eq!(s.to_string(), "•••(env:OPENAI_KEY)");
    assert_eq!(format!("{:?}", Exposed::new("hunter2".to_string())), "•••");
}

#[test]
fn a_secret_round_trips_as_its_reference_and_reads_no_other_shape() {
    let s: Secret<u64> = Secret::reference("file:pin").unwrap();
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(v, json!({"secretRef": "file:pin"}));
    let back: Secret<u64> = serde_json::from_value(v).unwrap();
    assert_eq!(back, s);
    for bad in [
        json!("sk-the-value-itself"),
        json!({"secretRef": "file:pin", "value": "x"}),
        json!({"value": "x"}),
        json!({}),
        json!({"secretRef": "no-scheme"}),
        json!({"secretRef": "file:../etc/passwd"}),
    ] {
        assert!(serde_json::from_value::<Secret>(bad.clone()).is_err(), "read {bad}");
    }
}

#[test]
fn references_are_checked() {
    let r = SecretRef::parse("env:OPENAI_KEY").unwrap();
    assert_eq!((r.scheme(), r.name()), ("env", "OPENAI_KEY"));
    for bad in ["", "env", ":x", "Env:x", "env:", "file:a/b", "file:..", "file:a\\b", "env:a\nb"] {
        let err = SecretRef::parse(bad).unwrap_err();
        assert!(matches!(err, SecretError::BadReference { .. }), "{bad:?}: {err}");
        assert!(err.to_string().contains("scheme:name"));
    }
    // A value pasted where a reference belongs is not repeated by the error.
    let pasted = "sk-proj-Q7vN1cB8zR5kW3yH6jD0sA2eG9uP4iO7tY1rE5wQ4fT9xL2m";
    let err = SecretRef::parse(pasted).unwrap_err().to_string();
    assert!(!err.contains("Q7vN1cB8") && err.contains("56 characters"), "{err}");
    let err = SecretRef::parse("vault:a/hunter2-secret").unwrap_err().to_string();
    assert!(!err.contains("hunter2") && err.contains("vault:"), "{err}");
}

#[test]
fn the_schema_says_it_is_a_reference() {
    let schema = schemars::schema_for!(Secret);
    let v = serde_json::to_value(&schema).unwrap();
    assert_eq!(v["required"], json!(["secretRef"]));
    assert_eq!(v["additionalProperties"], json!(false));
    assert!(v["description"].as_str().unwrap().contains("never the secret's value"));
}

#[test]
fn file_secrets_are_written_then_read_back() {
    let dir = std::env::temp_dir().join(format!("agentflow-secret-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secrets =
        Secrets::new().with(EnvSecrets::only(["AGENTFLOW_TEST_NONE"])).with(FileSecrets::new(&dir)).writable("file");
    block_on(async {
        let r = secrets.put("tok", Exposed::new("v4lue".to_string())).await.unwrap();
        assert_eq!(r.as_str(), "file:tok");
        let s: Secret = Secret::from_ref(r);
        assert_eq!(s.resolve(&secrets).await.unwrap().expose(), "v4lue");
        // A file written by hand with a newline reads without it.
        std::fs::write(dir.join("pin"), "1234\n").unwrap();
        let pin: Secret<u32> = Secret::reference("file:pin").unwrap();
        assert_eq!(*pin.resolve(&secrets).await.unwrap().expose(), 1234);
        let word: Secret<u32> = Secret::reference("file:tok").unwrap();
        let err = word.resolve(&secrets).await.unwrap_err();
        assert!(matches!(err, SecretError::Parse { .. }) && !err.to_string().contains("v4lue"), "{err}");
        let missing: Secret = Secret::reference("file:nope").unwrap();
        assert!(matches!(missing.resolve(&secrets).await, Err(SecretError::Missing { .. })));
        let vault: Secret = Secret::reference("vault:x").unwrap();
        let err = vault.resolve(&secrets).await.unwrap_err();
        assert!(matches!(err, SecretError::UnknownScheme { .. }) && err.to_string().contains("Secrets::new()"));
        let env_only = Secrets::new().with(EnvSecrets::only(["PATH"]));
        assert!(matches!(env_only.put("x", Exposed::new(String::new())).await, Err(SecretError::ReadOnly { .. })));
        let env = EnvSecrets::only(["PATH"]);
        assert!(matches!(env.put("x", Exposed::new(String::new())).await, Err(SecretError::ReadOnly { .. })));
        // A reference someone else wrote reads only the variables the application listed.
        assert!(env_only.get(&SecretRef::parse("env:PATH").unwrap()).await.is_ok());
        let other = env_only.get(&SecretRef::parse("env:HOME").unwrap()).await.unwrap_err();
        assert!(matches!(other, SecretError::NotAllowed { .. }), "{other}");
        let prefixed = EnvSecrets::prefixed("PA");
        assert!(prefixed.get(&SecretRef::parse("env:PATH").unwrap()).await.is_ok());
        let empty = EnvSecrets::prefixed("");
        assert!(matches!(empty.get(&SecretRef::parse("env:PATH").unwrap()).await, Err(SecretError::NotAllowed { .. })));
    });
    std::fs::remove_dir_all(&dir).unwrap();
}
