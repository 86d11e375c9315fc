//! What an attempt keeps of the exchange with the merchant: the request's
//! headers as sent, the answer's headers and the start of its body as text,
//! with credentials taken out (docs/delivery.md, "Attempt data").
//!
//! Pure functions, no IO: the worker reads at most
//! [`read_limit`] bytes of a body and hands them here.
//!
//! - The body is decoded as lossy UTF-8, control characters other than
//!   tab and line breaks become U+FFFD, and it is cut to at most the snippet
//!   size on a character boundary; `truncated` says whether anything was cut.
//! - Anything equal to one of the merchant's signing secrets (current or
//!   previous, and a Standard Webhooks secret's key without `whsec_`) becomes
//!   `[redacted]`, as does the credential after `Bearer ` or `Basic `.
//!   Secrets are redacted before the cut, so a secret straddling the cut
//!   leaves no prefix behind.
//! - Headers whose name suggests a credential (`authorization`, `cookie`,
//!   `set-cookie`, `*token*`, `*secret*`, `*api-key*`, …) keep their name and
//!   lose their value. At most [`MAX_HEADERS`] headers of at most
//!   [`MAX_HEADER_VALUE`] bytes each are kept.

use reqwest::header::HeaderMap;

use super::model::Headers;

/// Replaces whatever looked like a credential.
pub const REDACTED: &str = "[redacted]";
/// Headers kept from one answer.
pub const MAX_HEADERS: usize = 64;
/// Bytes kept of one header value.
pub const MAX_HEADER_VALUE: usize = 512;
/// Extra bytes read past the snippet so that a secret straddling the cut is
/// still seen whole (longer than any signing secret Sluice generates or accepts in practice).
const SECRET_MARGIN: usize = 256;

/// How many bytes of a body to read for a snippet of `snippet_bytes`.
pub fn read_limit(snippet_bytes: usize) -> usize {
    snippet_bytes + SECRET_MARGIN
}

/// The start of a body as text: (snippet, truncated). `more` says the body
/// went on past `raw` (the reader stopped at [`read_limit`]).
pub fn body_snippet(raw: &[u8], more: bool, snippet_bytes: usize, secrets: &[&str]) -> (String, bool) {
    let text: String = String::from_utf8_lossy(raw)
        .chars()
        .map(|c| if c.is_control() && !matches!(c, '\n' | '\r' | '\t') { char::REPLACEMENT_CHARACTER } else { c })
        .collect();
    let text = redact(&text, secrets);
    let (cut, was_cut) = cut_at(&text, snippet_bytes);
    (cut.to_owned(), was_cut || more)
}

/// `text` cut to at most `max` bytes on a character boundary, and whether it was cut.
pub fn cut_at(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// Every secret (and what follows `Bearer ` / `Basic `) replaced by [`REDACTED`].
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for needle in secret_forms(secrets) {
        if out.contains(needle) {
            out = out.replace(needle, REDACTED);
        }
    }
    redact_schemes(&out)
}

/// Each secret as it could appear: whole, and a Standard Webhooks secret's
/// key without its `whsec_` prefix. Very short strings are skipped (they
/// would redact ordinary text; secrets Sluice generates are 32+ characters).
fn secret_forms<'a>(secrets: &[&'a str]) -> Vec<&'a str> {
    let mut forms: Vec<&str> = secrets
        .iter()
        .flat_map(|s| [Some(*s), s.strip_prefix("whsec_")])
        .flatten()
        .filter(|s| s.len() >= 8)
        .collect();
    // Longest first, so a secret is not half-replaced through a shorter form.
    forms.sort_by_key(|s| std::cmp::Reverse(s.len()));
    forms
}

/// `Bearer xyz` / `Basic xyz` (any case) → `Bearer [redacted]`.
fn redact_schemes(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let hit = ["bearer ", "basic "].iter().find(|p| lower[i..].starts_with(*p)).filter(|_| {
            // Only as a word of its own.
            i == 0 || !lower.as_bytes()[i - 1].is_ascii_alphanumeric()
        });
        let Some(prefix) = hit else {
            let c = text[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
            continue;
        };
        let start = i + prefix.len();
        let token_len = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || "-._~+/=:".contains(c)))
            .unwrap_or(text.len() - start);
        out.push_str(&text[i..start]);
        if token_len > 0 {
            out.push_str(REDACTED);
        }
        i = start + token_len;
    }
    out
}

/// Whether a header's value is a credential by its name.
fn is_credential_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "authorization"
        || n == "proxy-authorization"
        || n.contains("cookie")
        || n.contains("token")
        || n.contains("secret")
        || n.contains("api-key")
        || n.contains("apikey")
        || n.contains("password")
}

/// An answer's headers as stored: credentials redacted, secrets redacted,
/// bounded in number and size, repeated names joined by `, `.
pub fn response_headers(headers: &HeaderMap, secrets: &[&str]) -> Headers {
    let mut out = Headers::new();
    for (name, value) in headers {
        let name = name.as_str();
        if out.len() >= MAX_HEADERS && !out.contains_key(name) {
            continue;
        }
        let value = if is_credential_header(name) {
            REDACTED.to_owned()
        } else {
            let text = String::from_utf8_lossy(value.as_bytes());
            let text = redact(&text, secrets);
            cut_at(&text, MAX_HEADER_VALUE).0.to_owned()
        };
        out.entry(name.to_owned())
            .and_modify(|v| {
                if v.len() < MAX_HEADER_VALUE {
                    v.push_str(", ");
                    v.push_str(&value);
                }
            })
            .or_insert(value);
    }
    out
}

/// The headers of a request as sent: `(name, value)` pairs Sluice set. The
/// signature values stay (they are per-message HMACs, useful to compare
/// with what the receiver computed); a credential header, should one ever be
/// set, does not.
pub fn request_headers<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Headers {
    pairs
        .into_iter()
        .map(|(k, v)| {
            let k = k.to_ascii_lowercase();
            let v = if is_credential_header(&k) { REDACTED.to_owned() } else { v.to_owned() };
            (k, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderName, HeaderValue};

    use super::*;

    const SECRET: &str = "3f9a0c6b2e7d41a8b5c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6";

    #[test]
    fn a_short_body_is_kept_whole_and_a_long_one_is_cut_on_a_character_boundary() {
        assert_eq!(body_snippet(b"{\"error\":\"bad sku\"}", false, 4096, &[]), ("{\"error\":\"bad sku\"}".into(), false));
        // 4095 ASCII bytes then a two-byte character: it does not fit whole.
        let mut body = "a".repeat(4095).into_bytes();
        body.extend_from_slice("é and more".as_bytes());
        let (text, cut) = body_snippet(&body, false, 4096, &[]);
        assert!(cut);
        assert_eq!(text.len(), 4095);
        assert!(text.chars().all(|c| c == 'a'));
    }

    #[test]
    fn the_reader_stopping_early_counts_as_cut() {
        let (text, cut) = body_snippet(b"abc", true, 4096, &[]);
        assert_eq!(text, "abc");
        assert!(cut);
    }

    #[test]
    fn invalid_utf8_and_control_bytes_become_replacement_characters() {
        let (text, _) = body_snippet(b"ok\xff\x00\tline\n", false, 4096, &[]);
        assert_eq!(text, "ok\u{fffd}\u{fffd}\tline\n");
    }

    #[test]
    fn secrets_and_bearer_tokens_never_survive() {
        let whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = format!("echo: secret={SECRET} key=MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw full={whsec} auth=Bearer abc.def-123 BASIC dXNlcjpwYXNz end");
        let (text, _) = body_snippet(body.as_bytes(), false, 4096, &[SECRET, whsec]);
        assert!(!text.contains(SECRET), "{text}");
        assert!(!text.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "{text}");
        assert!(!text.contains("abc.def-123") && !text.contains("dXNlcjpwYXNz"), "{text}");
        assert_eq!(text, "echo: secret=[redacted] key=[redacted] full=[redacted] auth=Bearer [redacted] BASIC [redacted] end");
        // "basic" inside a word is left alone.
        assert_eq!(redact("nonbasic stuff", &[]), "nonbasic stuff");
    }

    #[test]
    fn a_secret_straddling_the_cut_leaves_no_prefix() {
        let mut body = "x".repeat(4090);
        body.push_str(SECRET);
        let (text, cut) = body_snippet(body.as_bytes(), false, 4096, &[SECRET]);
        assert!(cut);
        assert!(!text.contains(&SECRET[..6]), "{}", &text[4080..]);
    }

    #[test]
    fn credential_headers_lose_their_values_and_repeats_are_joined() {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.append("set-cookie", HeaderValue::from_static("sid=abc"));
        h.append("set-cookie", HeaderValue::from_static("x=y"));
        h.insert("x-auth-token", HeaderValue::from_static("tok"));
        h.append("vary", HeaderValue::from_static("accept"));
        h.append("vary", HeaderValue::from_static("origin"));
        h.insert(HeaderName::from_static("x-echo"), HeaderValue::from_str(&format!("got {SECRET}")).expect("value"));
        let out = response_headers(&h, &[SECRET]);
        assert_eq!(out["content-type"], "application/json");
        assert_eq!(out["set-cookie"], "[redacted], [redacted]");
        assert_eq!(out["x-auth-token"], REDACTED);
        assert_eq!(out["vary"], "accept, origin");
        assert_eq!(out["x-echo"], "got [redacted]");
    }

    #[test]
    fn request_headers_keep_signatures_and_drop_credentials() {
        let out = request_headers([("X-Webhook-Signature", "abc123"), ("Authorization", "Bearer x")]);
        assert_eq!(out["x-webhook-signature"], "abc123");
        assert_eq!(out["authorization"], REDACTED);
    }
}
