//! `GET /`: the console's page, `console.html`, with the headers that keep it to itself: a
//! `Content-Security-Policy` that lets run only its own inline script and style (by their
//! SHA-256 hashes, computed once: the page is a constant), talk only to this server, and be
//! framed by no one; `nosniff`; and `no-store`.

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;

use super::Console;

/// The page. Its one `<script>` and one `<style>` are hashed as they are written here.
const PAGE: &str = include_str!("console.html");

/// Where the page says whether the server asks for a token: replaced at each request, since
/// a reload may put tokens in force. It is outside the script and the style, so their hashes
/// hold.
const TOKENS: &str = "data-tokens=\"unknown\"";

pub(super) async fn page(State(console): State<Arc<Console>>) -> Response {
    let tokens = if console.limiter.auth().required() {
        "data-tokens=\"required\""
    } else {
        "data-tokens=\"none\""
    };
    let mut response = PAGE.replacen(TOKENS, tokens, 1).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CONTENT_SECURITY_POLICY, policy().clone());
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// The page's `Content-Security-Policy`: nothing by default; its script and style by hash;
/// requests to this origin only (`connect-src 'self'`); an icon from a `data:` URL (the page
/// names an empty one, so that the browser asks for no `/favicon.ico`).
fn policy() -> &'static HeaderValue {
    static POLICY: OnceLock<HeaderValue> = OnceLock::new();
    POLICY.get_or_init(|| {
        let script = inline(PAGE, "script").map(hash).unwrap_or_default();
        let style = inline(PAGE, "style").map(hash).unwrap_or_default();
        let policy = format!(
            "default-src 'none'; script-src '{script}'; style-src '{style}'; \
             connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'"
        );
        // Hashes are base64 and the rest ASCII: always a valid header value.
        HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("default-src 'none'"))
    })
}

/// The text of the one `<tag>` element of `page`, as the browser hashes it.
fn inline<'a>(page: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = page.find(&open)? + open.len();
    let end = start + page[start..].find(&format!("</{tag}>"))?;
    Some(&page[start..end])
}

/// `sha256-BASE64`, a CSP source of `text`.
fn hash(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_one_script_and_one_style_both_hashed() {
        for tag in ["script", "style"] {
            assert_eq!(PAGE.matches(&format!("<{tag}")).count(), 1, "<{tag}>");
            assert!(
                inline(PAGE, tag).is_some_and(|text| text.len() > 100),
                "{tag}"
            );
        }
        let policy = policy().to_str().unwrap();
        assert_eq!(policy.matches("'sha256-").count(), 2, "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
    }

    #[test]
    fn the_page_names_no_asset_of_another_origin_and_writes_no_markup() {
        assert_eq!(PAGE.matches(TOKENS).count(), 1);
        // SVG's namespace is a name, not a place the browser goes.
        let page = PAGE.replace("\"http://www.w3.org/2000/svg\"", "");
        for outside in ["http://", "https://", "//cdn", "@import", "src=\"", "url("] {
            assert!(!page.contains(outside), "the page names {outside}");
        }
        // Keys are chosen by clients: the page writes server strings as text only.
        for markup in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!PAGE.contains(markup), "the page uses {markup}");
        }
    }

    #[test]
    fn a_hash_is_the_base64_of_sha256() {
        // echo -n 'abc' | openssl dgst -sha256 -binary | base64
        assert_eq!(
            hash("abc"),
            "sha256-ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
        );
    }
}
