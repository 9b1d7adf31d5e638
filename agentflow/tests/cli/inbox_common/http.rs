//! HTTP helpers of the inbox tests: a client that follows no redirect, logging in through the
//! form, GETs and POSTs as a user (cookies handled by hand).

use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};

use super::csrf_in;

/// A client that follows no redirect.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
}

/// The `name=value` of the cookie `name` set by a response; the server names its cookies for
/// its port (`agentflow_session_8700`), and `name` is the part before it.
pub fn set_cookie(r: &reqwest::Response, name: &str) -> Option<String> {
    let port = r.url().port().unwrap_or(80);
    r.headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}_{port}=")))
        .map(|v| v.split(';').next().unwrap_or_default().to_string())
}

/// The name of the server's cookie `name` for the server at `base` (`http://127.0.0.1:PORT`).
pub fn cookie_name(base: &str, name: &str) -> String {
    let port = base.rsplit(':').next().unwrap_or_default();
    format!("{name}_{port}")
}

/// A logged-in user: the session cookie and the CSRF token of its forms.
pub struct User {
    pub cookie: String,
    pub csrf: String,
}

/// Logs in with `token` through the login form, and reads the CSRF token from the inbox.
pub async fn login(base: &str, token: &str) -> User {
    let c = client();
    let form = c.get(format!("{base}/login")).send().await.unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    let login_cookie = set_cookie(&form, "agentflow_login").expect("the login form sets its CSRF cookie");
    let page = form.text().await.unwrap();
    let r = c
        .post(format!("{base}/login"))
        .header(COOKIE, &login_cookie)
        .form(&[("token", token), ("csrf", &csrf_in(&page))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "login as {token} failed: {}", r.text().await.unwrap_or_default());
    let raw = r
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{}=", cookie_name(base, "agentflow_session"))))
        .expect("a session cookie")
        .to_string();
    assert!(raw.contains("HttpOnly") && raw.contains("SameSite=Strict"), "{raw}");
    // Plain HTTP on loopback: a `Secure` cookie would never come back (see --secure-cookies).
    assert!(!raw.contains("Secure"), "{raw}");
    let cookie = raw.split(';').next().unwrap().to_string();
    let inbox = c.get(format!("{base}/")).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(inbox.status(), StatusCode::OK);
    let csrf = csrf_in(&inbox.text().await.unwrap());
    User { cookie, csrf }
}

/// The id of the question a page's answer form names (a browser sends it back with the answer).
pub fn form_question(page: &str) -> String {
    let field = "name=\"question\" value=\"";
    let at = page.find(field).unwrap_or_else(|| panic!("an answer form names its question: {page}")) + field.len();
    page[at..].split('"').next().unwrap_or_default().to_string()
}

/// POSTs a form as `user` (with its CSRF token unless `fields` names one).
pub async fn post(base: &str, user: Option<&User>, path: &str, fields: &[(&str, &str)]) -> (StatusCode, String) {
    let mut form: Vec<(&str, &str)> = fields.to_vec();
    let mut req = client().post(format!("{base}{path}"));
    if let Some(u) = user {
        req = req.header(COOKIE, &u.cookie);
        if !fields.iter().any(|(k, _)| *k == "csrf") {
            form.push(("csrf", &u.csrf));
        }
    }
    let r = req.form(&form).send().await.unwrap();
    let status = r.status();
    let location = r.headers().get(LOCATION).and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = r.text().await.unwrap();
    (status, location.unwrap_or(body))
}

pub async fn get(base: &str, user: Option<&User>, path: &str) -> (StatusCode, String) {
    let mut req = client().get(format!("{base}{path}"));
    if let Some(u) = user {
        req = req.header(COOKIE, &u.cookie);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let location = r.headers().get(LOCATION).and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = r.text().await.unwrap();
    (status, location.unwrap_or(body))
}
