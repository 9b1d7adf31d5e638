use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Secret<T>(T);

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[state(version = 2)]
struct Customer {
    #[state(pii)]
    email: String,
    #[state(credential)]
    webhook_token: String,
    #[state(pii, credential)]
    #[reduce(append)]
    personal_tokens: Vec<String>,
    #[state(pii)]
    api_key: Option<Secret<String>>,
    #[reduce(add)]
    visits: u32,
}

fn main() {
    let marks: Vec<(&str, bool, bool)> =
        Customer::FIELDS.iter().map(|f| (f.name, f.personal, f.credential)).collect();
    assert_eq!(
        marks,
        [
            ("email", true, false),
            ("webhook_token", false, true),
            ("personal_tokens", true, true),
            ("api_key", true, false),
            ("visits", false, false),
        ]
    );
    let mut c = Customer::default();
    c.apply(Customer::update().personal_tokens(vec!["a".into()]).visits(2));
    c.apply(Customer::update().personal_tokens(vec!["b".into()]).api_key(Some(Secret("ref".into()))));
    assert_eq!(c.personal_tokens, ["a", "b"]);
    assert_eq!(c.visits, 2);
    // An update's Debug output (what events and traces print) never shows a personal value.
    let shown = format!("{:?}", Customer::update().email("ada@example.com".into()).visits(1));
    assert_eq!(shown, "CustomerUpdate { email: •••, visits: 1 }");
}
