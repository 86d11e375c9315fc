//! HTTPS-only merchants (the onboarding checklist's "HTTPS with a valid
//! certificate"): with https required, a plain-http URL is refused, a
//! merchant that still has one is held (its deliveries wait, unsent and not
//! failed), and a certificate that does not verify is named on the attempt.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::delivery::ops::{self, Actor, OpsError};
use sluice_engine::delivery::ssrf::{SsrfError, SsrfPolicy};
use sluice_engine::delivery::worker::HOLD_RECHECK;
use sluice_engine::delivery::*;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::receiver::Reply;
use super::{contract, test_config, Harness, NowTs};

contract!(
    a_plain_http_merchant_is_held_until_its_url_is_https_and_a_bad_certificate_is_named,
    plain_http_urls_are_refused_while_https_is_required,
);

/// A TLS server on loopback presenting a self-signed certificate for
/// 127.0.0.1 (no client trusts it): every handshake fails on the client's side.
async fn untrusted_tls_server() -> SocketAddr {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(include_bytes!("fixtures/self_signed.crt"))
        .collect::<Result<_, _>>()
        .expect("certificate");
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("fixtures/self_signed.key")).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(stream).await;
            });
        }
    });
    addr
}

fn https_required() -> WorkerConfig {
    WorkerConfig {
        ssrf: SsrfPolicy::allowing(&["127.0.0.0/8", "::1/128"]).expect("allow-list"),
        ..test_config("w-https")
    }
}

async fn a_plain_http_merchant_is_held_until_its_url_is_https_and_a_bad_certificate_is_named(db: sluice_engine::db::testing::TestDb) {
    // Registered while plain http was accepted, delivered by a worker that requires https.
    let h = Harness::new(db, Reply::Status(200)).await;
    let strict = https_required();
    let worker = Worker::new(h.store.clone(), h.clock.clone(), strict.clone()).expect("worker");
    let id = h.event("payment.status_changed", "paid").await;
    let report = worker.run_once().await.expect("step");
    assert_eq!((report.claimed, report.held, report.failed), (1, 1, 0), "{report:?}");
    let d = h.delivery(&id).await;
    assert_eq!(d.status, DeliveryStatus::Pending);
    assert_eq!(d.next_attempt_at, h.clock.now_ts() + HOLD_RECHECK);
    assert_eq!((d.fast_attempts, d.deferrals), (0, 0), "holding spends nothing");
    assert!(h.detail(&id).await.attempts.is_empty(), "no attempt while held");
    assert!(h.receiver.received().is_empty());

    // Looked at again later: still waiting, still nothing sent.
    h.clock.advance(Duration::from_secs(3_600));
    let report = worker.run_once().await.expect("step");
    assert_eq!((report.held, report.failed), (1, 0), "{report:?}");
    assert_eq!(h.delivery(&id).await.status, DeliveryStatus::Pending);
    assert!(h.receiver.received().is_empty());

    // The admin gives it an https URL: the next look sends it. This server's
    // certificate is self-signed, so the attempt fails and says why.
    let tls = untrusted_tls_server().await;
    let url = format!("https://{tls}/hook");
    ops::update_merchant_url(&h.store, &h.merchant.id, &url, &strict.ssrf, Actor::named("test"), h.clock.now_ts()).await.expect("https URL");
    h.clock.advance(HOLD_RECHECK);
    let report = worker.run_once().await.expect("step");
    assert_eq!(report.held, 0, "{report:?}");
    let attempts = h.detail(&id).await.attempts;
    let last = attempts.last().expect("one attempt");
    assert_eq!(last.outcome, AttemptOutcome::Network);
    let error = last.error.as_deref().unwrap_or_default();
    assert!(error.starts_with("TLS certificate error: "), "{error}");
    assert!(error.contains("UnknownIssuer"), "{error}");
}

async fn plain_http_urls_are_refused_while_https_is_required(db: sluice_engine::db::testing::TestDb) {
    let h = Harness::new(db, Reply::Status(200)).await;
    let strict = https_required();
    let input = MerchantIn { name: "Plain".into(), url: h.receiver.url(), scheme: SigningScheme::Sluice, secret: None };
    let created = ops::create_merchant(&h.store, input, &strict.ssrf, &strict.breaker, Actor::named("test"), h.clock.now_ts()).await;
    assert!(matches!(created, Err(OpsError::Url(SsrfError::PlainHttp))), "{created:?}");
    let updated = ops::update_merchant_url(&h.store, &h.merchant.id, "http://127.0.0.1:9/hook", &strict.ssrf, Actor::named("test"), h.clock.now_ts()).await;
    assert!(matches!(updated, Err(OpsError::Url(SsrfError::PlainHttp))), "{updated:?}");
    assert_eq!(h.store.merchant(&h.merchant.id).await.expect("merchant").url, h.merchant.url, "nothing changed");
}
