//! API keys. With a key set, every request but `/health` must carry it, as OpenAI clients send
//! it (`Authorization: Bearer KEY`) or, for the web UI, in a cookie. A browser gets the cookie by
//! opening the link the server prints (`/?token=KEY`): the answer sets it (HttpOnly,
//! SameSite=Strict) and sends the browser on to the same page without the token in its address.

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use playground::{AppError, ErrorKind};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The query parameter of the link that lets a browser in.
const TOKEN_PARAM: &str = "token";

/// A secret every request must present.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

/// What a request's credentials allow.
pub(crate) enum Admission {
    Admitted,
    /// The token link: set the cookie and send the browser on.
    SetCookie(Response),
    Refused(AppError),
}

impl ApiKey {
    /// A key must be long enough not to be guessed and fit in a header and a cookie.
    pub fn new(key: impl Into<String>) -> Result<Self, String> {
        let key = key.into();
        let usable = key
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\'));
        if key.len() < 16 || !usable {
            return Err(
                "an API key needs at least 16 printable ASCII characters, without \
                        spaces, quotes, commas, semicolons or backslashes"
                    .into(),
            );
        }
        Ok(Self(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn matches(&self, presented: &str) -> bool {
        self.0.as_bytes().ct_eq(presented.as_bytes()).into()
    }

    /// Whether the request may go on; `port` names the cookie, since browsers share cookies
    /// between the ports of one host.
    pub(crate) fn admit(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        port: &str,
    ) -> Admission {
        if uri.path() == "/health" {
            return Admission::Admitted;
        }
        let cookie_name = format!("medusa_token_{port}");
        if bearer(headers).is_some_and(|key| self.matches(key))
            || cookie(headers, &cookie_name).is_some_and(|key| self.matches(key))
        {
            return Admission::Admitted;
        }
        if *method == Method::GET {
            if let Some(token) = query_token(uri) {
                if self.matches(&token) {
                    return Admission::SetCookie(self.token_redirect(uri, &cookie_name));
                }
            }
        }
        // OpenAI clients know this case by OpenAI's code.
        let code = if is_openai_path(uri.path()) {
            "invalid_api_key"
        } else {
            "unauthorized"
        };
        Admission::Refused(AppError::new(
            ErrorKind::Unauthorized,
            code,
            "this server needs its API key: send `Authorization: Bearer KEY`, or open the link \
             with `?token=KEY` that `medusa serve` printed",
        ))
    }

    fn token_redirect(&self, uri: &Uri, cookie_name: &str) -> Response {
        let rest: Vec<(String, String)> =
            form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                .filter(|(name, _)| name != TOKEN_PARAM)
                .map(|(name, value)| (name.into_owned(), value.into_owned()))
                .collect();
        let mut location = uri.path().to_owned();
        if !rest.is_empty() {
            location.push('?');
            location.push_str(
                &form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(rest)
                    .finish(),
            );
        }
        let cookie = format!(
            "{cookie_name}={}; HttpOnly; SameSite=Strict; Path=/",
            self.0
        );
        let mut response = StatusCode::SEE_OTHER.into_response();
        let headers = response.headers_mut();
        // Both values are built from checked text: a path, and a key of header-safe bytes.
        if let (Ok(location), Ok(cookie)) = (
            HeaderValue::from_str(&location),
            HeaderValue::from_str(&cookie),
        ) {
            headers.insert(header::LOCATION, location);
            headers.insert(header::SET_COOKIE, cookie);
        }
        response
    }
}

/// The 401 answer, which tells clients how to authenticate.
pub(crate) fn unauthorized(err: AppError) -> Response {
    let mut response = ApiError(err).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
}

fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

fn query_token(uri: &Uri) -> Option<String> {
    form_urlencoded::parse(uri.query()?.as_bytes())
        .find(|(name, _)| name == TOKEN_PARAM)
        .map(|(_, value)| value.into_owned())
}

/// The OpenAI-compatible routes (`openai`), with and without the `/v1` prefix (llama-server
/// answers both).
fn is_openai_path(path: &str) -> bool {
    let path = path.strip_prefix("/v1").unwrap_or(path);
    matches!(
        path,
        "/chat/completions" | "/completions" | "/responses" | "/embeddings" | "/models"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef-key";

    fn admit(
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
    ) -> Result<Option<Response>, &'static str> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let key = ApiKey::new(KEY).unwrap();
        match key.admit(&method, &uri.parse().unwrap(), &map, "8080") {
            Admission::Admitted => Ok(None),
            Admission::SetCookie(response) => Ok(Some(response)),
            Admission::Refused(err) => Err(err.code),
        }
    }

    #[test]
    fn keys_must_be_long_and_header_safe() {
        assert!(ApiKey::new(KEY).is_ok());
        for bad in [
            "short",
            "0123456789abcdef key",
            "0123456789abcdef;x",
            "0123456789abcdéf",
        ] {
            assert!(ApiKey::new(bad).is_err(), "{bad}");
        }
        assert_eq!(format!("{:?}", ApiKey::new(KEY).unwrap()), "ApiKey(..)");
    }

    #[test]
    fn the_key_is_taken_from_a_bearer_header_or_the_cookie() {
        let bearer = format!("Bearer {KEY}");
        assert!(matches!(
            admit(Method::POST, "/v1/models", &[("authorization", &bearer)]),
            Ok(None)
        ));
        let lower = format!("bearer {KEY}");
        assert!(matches!(
            admit(Method::GET, "/api/runs", &[("authorization", &lower)]),
            Ok(None)
        ));
        let cookie = format!("other=1; medusa_token_8080={KEY}");
        assert!(matches!(
            admit(Method::GET, "/", &[("cookie", &cookie)]),
            Ok(None)
        ));
        assert!(matches!(admit(Method::GET, "/health", &[]), Ok(None)));
        for headers in [
            vec![],
            vec![("authorization", "Bearer wrong-key-0123456789")],
            vec![("authorization", "Basic MDEyMzQ1Njc4OWFiY2RlZi1rZXk=")],
            // Another port's cookie is another server's.
            vec![("cookie", "medusa_token_9090=0123456789abcdef-key")],
        ] {
            assert_eq!(
                admit(Method::GET, "/api/info", &headers).err(),
                Some("unauthorized")
            );
        }
    }

    #[test]
    fn the_token_link_sets_the_cookie_and_drops_the_token() {
        let uri = format!("/history?token={KEY}&tab=runs");
        let response = admit(Method::GET, &uri, &[]).unwrap().unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(response.headers()[header::LOCATION], "/history?tab=runs");
        assert_eq!(
            response.headers()[header::SET_COOKIE],
            format!("medusa_token_8080={KEY}; HttpOnly; SameSite=Strict; Path=/").as_str()
        );
        let root = admit(Method::GET, &format!("/?token={KEY}"), &[])
            .unwrap()
            .unwrap();
        assert_eq!(root.headers()[header::LOCATION], "/");
        // A wrong token, or one sent with a POST, lets nothing in.
        assert_eq!(
            admit(Method::GET, "/?token=nope", &[]).err(),
            Some("unauthorized")
        );
        let post = format!("/api/generate?token={KEY}");
        assert_eq!(admit(Method::POST, &post, &[]).err(), Some("unauthorized"));
    }
}
