//! The retry executor as `reqwest-middleware`, so a Rust worker's call site
//! stays one line.
//!
//! The middleware builds the [`CallTarget`] from the request: scope from a
//! [`Scope`] extension or the host's scope, account from an [`Account`]
//! extension or the `x-sluice-account` header (removed before sending), the
//! lane from a [`Priority`] extension (`normal` without one), method and path
//! from the request itself; the limiter resolves the rule from those.
//!
//! A final response (2xx, or a 4xx the upstream meant) comes back as `Ok`.
//! Every other give-up comes back as `Err(Error::Middleware)` wrapping a
//! [`RetryError`] whose `reason` says why and which keeps the last response,
//! so `error.downcast_ref::<MiddlewareRetryError>()` recovers both.

use std::collections::HashMap;
use std::sync::Arc;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Error, Middleware, Next};

use super::executor::{
    Call, GiveUpReason, LastAttempt, RetryError, RetryExecutor, SendAttempt, TransportError, UpstreamResponse,
};
use super::gate::CallTarget;
use super::outcome::{classify_reqwest_error, NetworkFailure};
use crate::quota::Priority;

/// Header naming the account, for callers that cannot set an extension.
/// Stripped before the request goes upstream.
pub const ACCOUNT_HEADER: &str = "x-sluice-account";

/// The account a request is made for (request extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account(pub String);

impl Account {
    pub fn new(account: impl Into<String>) -> Self {
        Account(account.into())
    }
}

/// The API scope of a request (request extension); overrides the host's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope(pub String);

impl Scope {
    pub fn new(scope: impl Into<String>) -> Self {
        Scope(scope.into())
    }
}

/// Marks a non-idempotent request as safe to send again after a timeout
/// (request extension), e.g. because it carries an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SafeToRepeat;

/// The error a give-up is wrapped in.
pub type MiddlewareRetryError = RetryError<Response, Error>;

/// Why the middleware could not even start.
#[derive(Debug, thiserror::Error)]
pub enum MiddlewareError {
    #[error("no scope for host {host:?}: set a Scope extension or map the host")]
    NoScope { host: String },
    #[error("invalid {ACCOUNT_HEADER} header")]
    InvalidAccountHeader,
}

/// Limits, retries and breaks upstream calls made through a
/// `reqwest_middleware::ClientWithMiddleware`.
#[derive(Debug, Clone)]
pub struct RetryMiddleware {
    executor: Arc<RetryExecutor>,
    host_scopes: HashMap<String, String>,
    default_scope: Option<String>,
}

impl RetryMiddleware {
    pub fn new(executor: Arc<RetryExecutor>) -> Self {
        RetryMiddleware { executor, host_scopes: HashMap::new(), default_scope: None }
    }

    /// Requests to `host` belong to `scope` unless a [`Scope`] extension says otherwise.
    pub fn scope_for_host(mut self, host: &str, scope: &str) -> Self {
        self.host_scopes.insert(host.to_ascii_lowercase(), scope.to_owned());
        self
    }

    /// The scope of requests to hosts not mapped otherwise.
    pub fn default_scope(mut self, scope: &str) -> Self {
        self.default_scope = Some(scope.to_owned());
        self
    }

    fn call_for(&self, req: &mut Request, extensions: &Extensions) -> Result<Call, MiddlewareError> {
        let host = req.url().host_str().unwrap_or_default().to_ascii_lowercase();
        let scope = extensions
            .get::<Scope>()
            .map(|s| s.0.clone())
            .or_else(|| self.host_scopes.get(&host).cloned())
            .or_else(|| self.default_scope.clone())
            .ok_or(MiddlewareError::NoScope { host })?;
        let header = match req.headers_mut().remove(ACCOUNT_HEADER) {
            Some(v) => Some(v.to_str().map_err(|_| MiddlewareError::InvalidAccountHeader)?.to_owned()),
            None => None,
        };
        let account = extensions.get::<Account>().map(|a| a.0.clone()).or(header);
        let priority = extensions.get::<Priority>().copied().unwrap_or_default();
        let target =
            CallTarget::new(account.as_deref(), &scope, req.method().clone(), req.url().path()).with_priority(priority);
        let mut call = Call::new(target);
        if extensions.get::<SafeToRepeat>().is_some() {
            call = call.safe_to_repeat();
        }
        if req.try_clone().is_none() {
            // A streaming body can be sent once only.
            call = call.at_most(1);
        }
        Ok(call)
    }
}

#[async_trait::async_trait]
impl Middleware for RetryMiddleware {
    async fn handle(&self, mut req: Request, extensions: &mut Extensions, next: Next<'_>) -> Result<Response, Error> {
        let call = self.call_for(&mut req, extensions).map_err(|e| Error::Middleware(e.into()))?;
        let attempt = ReqwestAttempt { request: Some(req), extensions, next };
        match self.executor.run(&call, attempt).await {
            Ok(done) => Ok(done.response),
            Err(RetryError {
                reason: GiveUpReason::NonRetryableStatus(_), last: Some(LastAttempt::Response(r)), ..
            }) => Ok(r),
            Err(e) => Err(Error::Middleware(e.into())),
        }
    }
}

struct ReqwestAttempt<'a> {
    request: Option<Request>,
    extensions: &'a mut Extensions,
    next: Next<'a>,
}

/// Returned for an attempt past the first of a request that cannot be cloned
/// (the executor is told to send it once, so this is a safety net).
#[derive(Debug, thiserror::Error)]
#[error("request body cannot be sent twice")]
struct NotClonable;

impl SendAttempt for ReqwestAttempt<'_> {
    type Response = Response;
    type Error = Error;

    fn send(&mut self, _attempt: u32) -> impl std::future::Future<Output = Result<Response, Error>> + Send {
        let request = match self.request.as_ref().and_then(Request::try_clone) {
            Some(copy) => Some(copy),
            None => self.request.take(),
        };
        let next = self.next.clone();
        let extensions = &mut *self.extensions;
        async move {
            match request {
                Some(request) => next.run(request, extensions).await,
                None => Err(Error::Middleware(NotClonable.into())),
            }
        }
    }
}

impl UpstreamResponse for Response {
    fn status(&self) -> http::StatusCode {
        Response::status(self)
    }

    fn headers(&self) -> &http::HeaderMap {
        Response::headers(self)
    }
}

impl TransportError for Error {
    fn failure(&self) -> NetworkFailure {
        match self {
            Error::Reqwest(e) => classify_reqwest_error(e),
            Error::Middleware(_) => NetworkFailure::Other,
        }
    }
}

impl TransportError for reqwest::Error {
    fn failure(&self) -> NetworkFailure {
        classify_reqwest_error(self)
    }
}
