//! Who may talk to the server. A web page in the user's browser can send requests to a loopback
//! server too, so every request is checked before it reaches a handler:
//! - without an API key, its `Host` must name this machine (loopback names) or a host the
//!   operator allowed, which defeats DNS rebinding (a hostile name resolving to 127.0.0.1);
//! - a state-changing request that comes from a page (it has an `Origin`) must come from this
//!   server's own origin or one the operator allowed, which defeats cross-site requests;
//! - with an API key set, it must carry the key (see `auth`).
//!
//! Requests without `Origin` (command-line clients, SDKs) pass the second check unless the
//! browser marked them as sent by another site's page (`Sec-Fetch-Site: cross-site` or
//! `same-site`): the UI is served from the server's own origin, so its requests say
//! `same-origin` (or `none`, typed into the address bar). JSON endpoints also refuse other
//! content types (see `extract`), so a page cannot send them a body without a CORS preflight,
//! which only allowed origins pass.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use playground::{AppError, ErrorKind};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::auth::{self, Admission, ApiKey};
use crate::error::ApiError;

/// The hosts and origins the operator allowed beyond this machine's loopback names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessPolicy {
    /// Host names (without port) requests may be addressed to, besides the loopback names.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) whose pages may change state, besides the server's own.
    pub allowed_origins: Vec<String>,
    /// The key every request but `/health` must carry; none on loopback by default.
    pub api_key: Option<ApiKey>,
    /// Directories whose files `/api/model` may load (the models cache, `--models-dir`).
    pub loadable_dirs: Vec<PathBuf>,
}

impl AccessPolicy {
    fn host_allowed(&self, host: &str) -> bool {
        is_loopback_name(host)
            || self
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(host))
    }

    fn origin_allowed(&self, origin: &str, own_authority: &str) -> bool {
        let own = ["http://", "https://"]
            .iter()
            .any(|scheme| origin.eq_ignore_ascii_case(&format!("{scheme}{own_authority}")));
        own || self
            .allowed_origins
            .iter()
            .any(|allowed| allowed.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }

    /// Why a request may not proceed, if it may not.
    pub fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), AppError> {
        let authority = authority(uri, headers);
        let (host, _) = split_authority(authority);
        // With a key, every request proves itself, and the browser's cookie is bound to the
        // name the user opened: a rebinding name gets nothing. Any name the server is reached
        // by will do then.
        if self.api_key.is_none() && (host.is_empty() || !self.host_allowed(host)) {
            return Err(AppError::new(
                ErrorKind::Forbidden,
                "forbidden_host",
                format!(
                    "requests addressed to host {authority:?} are refused; start the server with \
                     --allowed-host NAME to accept a name other than localhost"
                ),
            ));
        }
        if changes_state(method) || opens_websocket(headers) {
            match headers.get(header::ORIGIN) {
                Some(origin) => {
                    let origin = origin.to_str().unwrap_or_default();
                    if !self.origin_allowed(origin, authority) {
                        return Err(AppError::new(
                            ErrorKind::Forbidden,
                            "forbidden_origin",
                            format!(
                                "requests from pages of {origin:?} are refused; start the \
                                 server with --allowed-origin ORIGIN to accept one"
                            ),
                        ));
                    }
                }
                // Without an origin to compare, the browser's word on where the request comes
                // from decides: another site's page is refused, whatever site it is.
                None => {
                    if let Some(site) = other_site(headers) {
                        return Err(AppError::new(
                            ErrorKind::Forbidden,
                            "cross_site_request",
                            format!(
                                "requests from pages of other sites (Sec-Fetch-Site: {site}) \
                                 are refused; pages of an origin allowed with \
                                 --allowed-origin must send their Origin header"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether `request` may use a place kept for health checks and the operator's clients
    /// when every other connection place is busy (see `listener`): `/health`, or a request that
    /// carries the API key. Without a key, only `/health`: nothing tells the operator's
    /// requests from others then.
    pub(crate) fn has_priority(&self, request: &Parts) -> bool {
        if request.uri.path() == "/health" {
            return true;
        }
        let Some(key) = &self.api_key else {
            return false;
        };
        let (_, port) = split_authority(authority(&request.uri, &request.headers));
        matches!(
            key.admit(
                &request.method,
                &request.uri,
                &request.headers,
                port.unwrap_or("80"),
            ),
            Admission::Admitted | Admission::SetCookie(_)
        )
    }
}

/// The `Sec-Fetch-Site` value of a request a browser sent for a page of another site (of
/// another origin on this site, too), if it is one.
fn other_site(headers: &HeaderMap) -> Option<&str> {
    let site = headers.get("sec-fetch-site")?.to_str().ok()?.trim();
    ["cross-site", "same-site"]
        .into_iter()
        .find(|other| site.eq_ignore_ascii_case(other))
}

/// The middleware: answers 403 to requests the policy refuses, 401 to those without the key.
pub async fn guard(
    State(policy): State<Arc<AccessPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let refused = |err: &AppError| {
        tracing::warn!(
            code = err.code,
            method = %request.method(),
            uri = %loggable_uri(request.uri()),
            "request refused"
        );
    };
    if let Err(err) = policy.check(request.method(), request.uri(), request.headers()) {
        refused(&err);
        return ApiError(err).into_response();
    }
    // Preflights carry no credentials; they change nothing and reveal nothing.
    if let Some(key) = policy
        .api_key
        .as_ref()
        .filter(|_| request.method() != Method::OPTIONS)
    {
        let (_, port) = split_authority(authority(request.uri(), request.headers()));
        match key.admit(
            request.method(),
            request.uri(),
            request.headers(),
            port.unwrap_or("80"),
        ) {
            Admission::Admitted => {}
            Admission::SetCookie(response) => return response,
            Admission::Refused(err) => {
                refused(&err);
                return auth::unauthorized(err);
            }
        }
    }
    next.run(request).await
}

/// Answers the CORS preflights of the allowed origins (their pages may then send JSON and the
/// key); other origins get no CORS headers, so browsers keep their requests from being sent.
pub fn cors(policy: &AccessPolicy) -> Option<CorsLayer> {
    let origins: Vec<_> = policy
        .allowed_origins
        .iter()
        .filter_map(|origin| origin.trim_end_matches('/').parse().ok())
        .collect();
    (!origins.is_empty()).then(|| {
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST])
            // Whatever headers the page's client sends (the openai SDK's `x-stainless-*`, say):
            // the origin is one the operator allowed, and the key is checked all the same.
            .allow_headers(AllowHeaders::mirror_request())
    })
}

/// A request's path for logs, its query string (which may carry the key, `?token=KEY`, or
/// other secrets a client put there) replaced by `?…`.
pub(crate) fn loggable_uri(uri: &Uri) -> String {
    match uri.query() {
        Some(_) => format!("{}?…", uri.path()),
        None => uri.path().to_owned(),
    }
}

/// A WebSocket is opened with a GET, and browsers let any page open one to any host: its
/// origin is checked like a state-changing request's.
fn opens_websocket(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"))
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The host the request is addressed to: its URI's authority where it has one (HTTP/2's
/// `:authority`, or an HTTP/1 request in absolute form, where `Host` is to be ignored), else its
/// `Host` header; empty when it has neither.
fn authority<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> &'a str {
    match uri.authority() {
        Some(authority) => authority.as_str(),
        None => headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default(),
    }
}

/// A `Host` header value as its host (an IPv6 address without its brackets) and its port, when
/// it names one.
fn split_authority(authority: &str) -> (&str, Option<&str>) {
    let authority = authority.trim();
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((host, after)) => (host, after.strip_prefix(':')),
            None => (rest, None),
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => (host, Some(port)),
            _ => (authority, None),
        },
    };
    let port = port.filter(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    (host, port)
}

/// Whether `host` (a name or an address, without port) names this machine's loopback interface.
pub fn is_loopback_name(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(host: Option<&str>, origin: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        }
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        headers
    }

    fn code(
        policy: &AccessPolicy,
        method: Method,
        host: Option<&str>,
        origin: Option<&str>,
    ) -> Option<&'static str> {
        policy
            .check(&method, &Uri::from_static("/"), &headers(host, origin))
            .err()
            .map(|e| e.code)
    }

    #[test]
    fn logged_uris_leave_the_query_out() {
        let uri: Uri = "/api/generate?token=0123456789abcdef-key&x=1"
            .parse()
            .unwrap();
        assert_eq!(loggable_uri(&uri), "/api/generate?…");
        assert_eq!(loggable_uri(&"/health".parse().unwrap()), "/health");
    }

    #[test]
    fn host_values_split_into_host_and_port() {
        assert_eq!(
            split_authority("localhost:8080"),
            ("localhost", Some("8080"))
        );
        assert_eq!(split_authority("127.0.0.1"), ("127.0.0.1", None));
        assert_eq!(split_authority("[::1]:8080"), ("::1", Some("8080")));
        assert_eq!(split_authority("[::1]"), ("::1", None));
        assert_eq!(split_authority("example.com:"), ("example.com", None));
        assert_eq!(split_authority("name:port"), ("name:port", None));
    }

    #[test]
    fn only_loopback_and_allowed_hosts_are_served() {
        let policy = AccessPolicy {
            allowed_hosts: vec!["box.lan".into()],
            ..AccessPolicy::default()
        };
        for host in [
            "localhost:8080",
            "LOCALHOST",
            "127.0.0.1:1",
            "127.8.9.10",
            "[::1]:80",
            "box.lan:8080",
            "BOX.LAN",
        ] {
            assert_eq!(code(&policy, Method::GET, Some(host), None), None, "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "0.0.0.0:8080",
            "192.168.1.2",
            "",
        ] {
            assert_eq!(
                code(&policy, Method::GET, Some(host), None),
                Some("forbidden_host"),
                "{host}"
            );
        }
        assert_eq!(
            code(&policy, Method::GET, None, None),
            Some("forbidden_host")
        );
    }

    #[test]
    fn an_http2_request_is_addressed_by_its_authority() {
        let policy = AccessPolicy::default();
        // HTTP/2 carries the host as `:authority`, in the URI, and no `Host` header.
        let check = |uri: &'static str, host: Option<&str>| {
            policy
                .check(&Method::GET, &Uri::from_static(uri), &headers(host, None))
                .err()
                .map(|e| e.code)
        };
        assert_eq!(check("http://127.0.0.1:8080/api/info", None), None);
        assert_eq!(check("https://[::1]/health", None), None);
        assert_eq!(
            check("http://attacker.example/api/info", None),
            Some("forbidden_host")
        );
        // The authority decides where both are given, as HTTP/1.1 says of the absolute form.
        assert_eq!(
            check("http://attacker.example/", Some("127.0.0.1:8080")),
            Some("forbidden_host")
        );
        assert_eq!(
            check("http://localhost:8080/", Some("attacker.example")),
            None
        );
    }

    #[test]
    fn pages_of_other_origins_cannot_change_state() {
        let policy = AccessPolicy {
            allowed_origins: vec!["http://localhost:5173/".into()],
            ..AccessPolicy::default()
        };
        let host = Some("127.0.0.1:8080");
        // Clients that are not pages send no Origin.
        assert_eq!(code(&policy, Method::POST, host, None), None);
        assert_eq!(
            code(&policy, Method::POST, host, Some("http://127.0.0.1:8080")),
            None
        );
        assert_eq!(
            code(&policy, Method::POST, host, Some("http://localhost:5173")),
            None
        );
        for origin in [
            "https://evil.example",
            "null",
            "http://127.0.0.1:8081",
            "http://localhost:8080",
        ] {
            assert_eq!(
                code(&policy, Method::POST, host, Some(origin)),
                Some("forbidden_origin"),
                "{origin}"
            );
            assert_eq!(
                code(&policy, Method::DELETE, host, Some(origin)),
                Some("forbidden_origin")
            );
            // Reading is left to the browser's same-origin policy: no CORS headers are sent.
            assert_eq!(code(&policy, Method::GET, host, Some(origin)), None);
        }
    }

    #[test]
    fn requests_a_browser_marks_as_from_other_sites_cannot_change_state() {
        let policy = AccessPolicy::default();
        let check = |method: Method, site: &str, origin: Option<&str>| {
            let mut headers = headers(Some("127.0.0.1:8080"), origin);
            headers.insert("sec-fetch-site", HeaderValue::from_str(site).unwrap());
            policy
                .check(&method, &Uri::from_static("/"), &headers)
                .err()
                .map(|e| e.code)
        };
        for site in ["cross-site", "Cross-Site", "same-site"] {
            assert_eq!(
                check(Method::POST, site, None),
                Some("cross_site_request"),
                "{site}"
            );
        }
        assert_eq!(
            check(Method::DELETE, "cross-site", None),
            Some("cross_site_request")
        );
        assert_eq!(check(Method::POST, "same-origin", None), None);
        assert_eq!(check(Method::POST, "none", None), None);
        // Reading is left to the browser's same-origin policy.
        assert_eq!(check(Method::GET, "cross-site", None), None);
        // An Origin says more than the marking: it decides.
        assert_eq!(
            check(Method::POST, "cross-site", Some("http://127.0.0.1:8080")),
            None
        );
        assert_eq!(
            check(Method::POST, "same-origin", Some("https://evil.example")),
            Some("forbidden_origin")
        );
    }

    #[test]
    fn health_checks_and_key_holders_have_priority() {
        let parts = |uri: &str, authorization: Option<&str>| {
            let mut request = axum::http::Request::get(uri).header(header::HOST, "127.0.0.1:8080");
            if let Some(value) = authorization {
                request = request.header(header::AUTHORIZATION, value);
            }
            request.body(()).unwrap().into_parts().0
        };
        let keyless = AccessPolicy::default();
        assert!(keyless.has_priority(&parts("/health", None)));
        assert!(!keyless.has_priority(&parts("/api/info", None)));
        let keyed = AccessPolicy {
            api_key: Some(ApiKey::new("0123456789abcdef-key").unwrap()),
            ..AccessPolicy::default()
        };
        assert!(keyed.has_priority(&parts("/health", None)));
        assert!(keyed.has_priority(&parts("/api/info", Some("Bearer 0123456789abcdef-key"))));
        assert!(keyed.has_priority(&parts("/?token=0123456789abcdef-key", None)));
        assert!(!keyed.has_priority(&parts("/api/info", Some("Bearer wrong-key-0123456789"))));
        assert!(!keyed.has_priority(&parts("/api/info", None)));
    }

    #[test]
    fn pages_of_other_origins_cannot_open_the_event_socket() {
        let policy = AccessPolicy::default();
        let upgrade = |origin: &str| {
            let mut headers = headers(Some("127.0.0.1:8080"), Some(origin));
            headers.insert(header::UPGRADE, HeaderValue::from_static("WebSocket"));
            policy
                .check(&Method::GET, &Uri::from_static("/"), &headers)
                .err()
                .map(|e| e.code)
        };
        assert_eq!(upgrade("https://evil.example"), Some("forbidden_origin"));
        assert_eq!(upgrade("http://127.0.0.1:8080"), None);
    }
}
