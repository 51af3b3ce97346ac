//! Headers on every answer that keep browsers from misusing it: the UI may not be framed by
//! another site, scripts and styles come only from this server, types are not sniffed, and no
//! page address leaks to other sites.

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::Response;

/// What the web UI needs and nothing more: its own scripts, its styles (Svelte and uPlot set
/// inline styles), images from itself or data URLs, and no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

const SECURITY_HEADERS: [(HeaderName, &str); 4] = [
    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::X_FRAME_OPTIONS, "DENY"),
];

pub async fn add_security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
    response
}
