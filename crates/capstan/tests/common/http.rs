//! A small HTTP client for the server tests: ureq with 4xx/5xx answered rather than raised, a session
//! cookie and CSRF token after a login, or a bearer token.

use std::time::Duration;

use serde_json::{Value, json};

/// A small HTTP client for the test (ureq, with 4xx/5xx answered rather than raised).
pub struct Http {
    pub base: String,
    pub agent: ureq::Agent,
    pub cookie: Option<String>,
    pub csrf: Option<String>,
    pub bearer: Option<String>,
}

pub struct Answer {
    pub status: u16,
    pub body: String,
    pub set_cookie: Option<String>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

impl Http {
    pub fn new(base: &str) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .new_agent();
        Http {
            base: base.to_string(),
            agent,
            cookie: None,
            csrf: None,
            bearer: None,
        }
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
        csrf: bool,
    ) -> Answer {
        let url = format!("{}{path}", self.base);
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(c) = &self.cookie {
            req = req.header("Cookie", c.as_str());
        }
        if let Some(t) = &self.bearer {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        if csrf && let Some(t) = &self.csrf {
            req = req.header("X-CSRF-Token", t.as_str());
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        if body.is_some() {
            req = req.header("Content-Type", "application/json");
        }
        let response = self
            .agent
            .run(req.body(payload).expect("request"))
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = response.status().as_u16();
        let set_cookie = response
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = response.into_body().read_to_string().unwrap_or_default();
        Answer {
            status,
            body,
            set_cookie,
        }
    }

    pub fn get(&self, path: &str) -> Answer {
        self.request("GET", path, None, &[], false)
    }

    pub fn post(&self, path: &str, body: Value) -> Answer {
        self.request("POST", path, Some(&body), &[], true)
    }

    pub fn login(&mut self, user: &str, password: &str) -> Answer {
        let a = self.request(
            "POST",
            "/api/session",
            Some(&json!({"username": user, "password": password})),
            &[],
            false,
        );
        if a.status == 200 {
            let cookie = a.set_cookie.clone().expect("a session cookie");
            assert!(
                cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Secure"),
                "{cookie}"
            );
            self.cookie = Some(cookie.split(';').next().unwrap_or_default().to_string());
            self.csrf = a.json()["csrfToken"].as_str().map(str::to_string);
        }
        a
    }
}
