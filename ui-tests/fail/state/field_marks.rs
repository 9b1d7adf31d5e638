use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Secret<T>(T);

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[state(pii)]
struct Customer {
    #[state(pii, pii)]
    email: String,
    #[state(credential)]
    api_key: Secret<String>,
    #[state(pi)]
    phone: String,
    #[state(version = 2)]
    name: String,
}

fn main() {}
