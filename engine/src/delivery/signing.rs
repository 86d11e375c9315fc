//! Request signing, and verification for receivers (docs/delivery.md).
//!
//! Two schemes, chosen per merchant:
//! - [`SigningScheme::Sluice`]: `X-Webhook-Id`, `X-Webhook-Timestamp` (Unix
//!   seconds), `X-Webhook-Signature` = lowercase hex HMAC-SHA256 with the
//!   secret's bytes as key over `timestamp + "." + body`.
//! - [`SigningScheme::StandardWebhooks`]: `webhook-id`, `webhook-timestamp`,
//!   `webhook-signature: v1,<base64>` over `id.timestamp.body`, with a
//!   `whsec_<base64>` secret whose decoded bytes are the key.
//!
//! During a secret rotation every secret signs and the signatures are sent
//! space-separated, so a receiver holding either secret accepts.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use reqwest::header::HeaderMap;
use sha2::Sha256;

use super::model::SigningScheme;

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SigningError {
    #[error("a Standard Webhooks secret must be `whsec_` followed by base64")]
    BadStandardSecret,
    #[error("the secret is empty")]
    EmptySecret,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("header {0} is missing or not text")]
    MissingHeader(&'static str),
    #[error("the timestamp is not a number of seconds")]
    BadTimestamp,
    #[error("the timestamp is outside the tolerance")]
    TimestampOutOfTolerance,
    #[error("no signature matches")]
    NoMatchingSignature,
    #[error(transparent)]
    Secret(#[from] SigningError),
}

/// Header names of a scheme: (id, timestamp, signature).
pub fn header_names(scheme: SigningScheme) -> (&'static str, &'static str, &'static str) {
    match scheme {
        SigningScheme::Sluice => ("x-webhook-id", "x-webhook-timestamp", "x-webhook-signature"),
        SigningScheme::StandardWebhooks => ("webhook-id", "webhook-timestamp", "webhook-signature"),
    }
}

/// Check a secret is usable with the scheme (done when a merchant is saved).
pub fn validate_secret(scheme: SigningScheme, secret: &str) -> Result<(), SigningError> {
    key_bytes(scheme, secret).map(|_| ())
}

/// A fresh random secret in the scheme's format.
pub fn generate_secret(scheme: SigningScheme) -> String {
    let bytes: [u8; 24] = rand::random();
    match scheme {
        SigningScheme::Sluice => hex::encode(bytes),
        SigningScheme::StandardWebhooks => format!("whsec_{}", B64.encode(bytes)),
    }
}

fn key_bytes(scheme: SigningScheme, secret: &str) -> Result<Vec<u8>, SigningError> {
    if secret.is_empty() {
        return Err(SigningError::EmptySecret);
    }
    match scheme {
        SigningScheme::Sluice => Ok(secret.as_bytes().to_vec()),
        SigningScheme::StandardWebhooks => {
            let b64 = secret.strip_prefix("whsec_").ok_or(SigningError::BadStandardSecret)?;
            match B64.decode(b64) {
                Ok(key) if !key.is_empty() => Ok(key),
                _ => Err(SigningError::BadStandardSecret),
            }
        }
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length; new_from_slice cannot fail for it.
    #[allow(clippy::expect_used)]
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            mac.update(b".");
        }
        mac.update(part);
    }
    mac
}

/// One signature, as it appears in the signature header.
pub fn sign_one(scheme: SigningScheme, secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Result<String, SigningError> {
    let key = key_bytes(scheme, secret)?;
    let ts = timestamp.to_string();
    Ok(match scheme {
        SigningScheme::Sluice => hex::encode(mac(&key, &[ts.as_bytes(), body]).finalize().into_bytes()),
        SigningScheme::StandardWebhooks => {
            format!("v1,{}", B64.encode(mac(&key, &[id.as_bytes(), ts.as_bytes(), body]).finalize().into_bytes()))
        }
    })
}

/// The three headers for a request: (name, value) pairs, signatures of every
/// secret joined by spaces.
pub fn sign(scheme: SigningScheme, secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> Result<[(&'static str, String); 3], SigningError> {
    let sigs = secrets.iter().map(|s| sign_one(scheme, s, id, timestamp, body)).collect::<Result<Vec<_>, _>>()?;
    let (h_id, h_ts, h_sig) = header_names(scheme);
    Ok([(h_id, id.to_owned()), (h_ts, timestamp.to_string()), (h_sig, sigs.join(" "))])
}

/// For receivers: check a request's signature with any of `secrets`, and that
/// its timestamp is within `tolerance_secs` of `now_secs`. Comparison is
/// constant-time (HMAC `verify_slice`).
pub fn verify(
    scheme: SigningScheme,
    secrets: &[&str],
    headers: &HeaderMap,
    body: &[u8],
    now_secs: i64,
    tolerance_secs: i64,
) -> Result<(), VerifyError> {
    let (h_id, h_ts, h_sig) = header_names(scheme);
    let get = |name: &'static str| headers.get(name).and_then(|v| v.to_str().ok()).ok_or(VerifyError::MissingHeader(name));
    let ts_text = get(h_ts)?;
    let ts: i64 = ts_text.trim().parse().map_err(|_| VerifyError::BadTimestamp)?;
    if (now_secs - ts).abs() > tolerance_secs {
        return Err(VerifyError::TimestampOutOfTolerance);
    }
    let sig_header = get(h_sig)?;
    let id = match scheme {
        SigningScheme::Sluice => headers.get(h_id).and_then(|v| v.to_str().ok()).unwrap_or(""),
        SigningScheme::StandardWebhooks => get(h_id)?,
    };
    for secret in secrets {
        let key = key_bytes(scheme, secret)?;
        for candidate in sig_header.split_whitespace() {
            let ok = match scheme {
                SigningScheme::Sluice => hex::decode(candidate)
                    .is_ok_and(|raw| mac(&key, &[ts_text.as_bytes(), body]).verify_slice(&raw).is_ok()),
                SigningScheme::StandardWebhooks => candidate
                    .strip_prefix("v1,")
                    .and_then(|b64| B64.decode(b64).ok())
                    .is_some_and(|raw| mac(&key, &[id.as_bytes(), ts_text.as_bytes(), body]).verify_slice(&raw).is_ok()),
            };
            if ok {
                return Ok(());
            }
        }
    }
    Err(VerifyError::NoMatchingSignature)
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderName, HeaderValue};

    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(HeaderName::from_static(k), HeaderValue::from_str(v).expect("header value"));
        }
        h
    }

    #[test]
    fn standard_webhooks_reproduces_the_published_vector() {
        assert_eq!(
            sign_one(SigningScheme::StandardWebhooks, SECRET, ID, TS, BODY).expect("sign"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn the_sluice_scheme_is_lowercase_hex_hmac_of_timestamp_dot_body() {
        // Independent check: HMAC-SHA256("key", "1614265330.{...}") computed with openssl:
        // printf '%s' '1614265330.{"test": 2432232314}' | openssl dgst -sha256 -hmac key
        let sig = sign_one(SigningScheme::Sluice, "key", ID, TS, BODY).expect("sign");
        assert_eq!(sig, "e072942fa4edb85c6ffa1c52b27567eb3d1cdc7d03704cdd5ad5487eefb4b2f3");
        assert_eq!(sig, sig.to_lowercase());
    }

    #[test]
    fn during_a_rotation_both_signatures_are_sent_and_either_secret_verifies() {
        for scheme in [SigningScheme::Sluice, SigningScheme::StandardWebhooks] {
            let (new, old) = (generate_secret(scheme), generate_secret(scheme));
            let pairs = sign(scheme, &[&new, &old], ID, TS, BODY).expect("sign");
            assert_eq!(pairs[2].1.split(' ').count(), 2);
            let h = headers(&pairs);
            assert_eq!(verify(scheme, &[&old], &h, BODY, TS + 10, 300), Ok(()));
            assert_eq!(verify(scheme, &[&new], &h, BODY, TS - 10, 300), Ok(()));
            let stranger = generate_secret(scheme);
            assert_eq!(verify(scheme, &[&stranger], &h, BODY, TS, 300), Err(VerifyError::NoMatchingSignature));
            assert_eq!(verify(scheme, &[&new], &h, b"tampered", TS, 300), Err(VerifyError::NoMatchingSignature));
            assert_eq!(verify(scheme, &[&new], &h, BODY, TS + 301, 300), Err(VerifyError::TimestampOutOfTolerance));
        }
    }

    #[test]
    fn the_published_vector_verifies_and_bad_secrets_are_refused() {
        let h = headers(&[("webhook-id", ID.into()), ("webhook-timestamp", TS.to_string()), ("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=".into())]);
        assert_eq!(verify(SigningScheme::StandardWebhooks, &[SECRET], &h, BODY, TS, 300), Ok(()));
        assert_eq!(validate_secret(SigningScheme::StandardWebhooks, "MfKQ9r8"), Err(SigningError::BadStandardSecret));
        assert_eq!(validate_secret(SigningScheme::StandardWebhooks, "whsec_!!!"), Err(SigningError::BadStandardSecret));
        assert_eq!(validate_secret(SigningScheme::Sluice, ""), Err(SigningError::EmptySecret));
        assert_eq!(verify(SigningScheme::Sluice, &["k"], &HeaderMap::new(), BODY, TS, 300), Err(VerifyError::MissingHeader("x-webhook-timestamp")));
    }
}
