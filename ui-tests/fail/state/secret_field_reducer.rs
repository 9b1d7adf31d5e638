// The check matches the type by its last path segment, so a local `Secret` stands in for
// `agentflow::Secret` here.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Secret<T>(T);

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Payment {
    #[reduce(append)]
    api_keys: Secret<Vec<String>>,
    #[reduce(add)]
    token: Option<Secret<u64>>,
    #[reduce(append)]
    log: Vec<String>,
}

fn main() {}
