//! The SSRF guard on merchant URLs.
//!
//! A merchant URL must be `http` or `https`, and every address the request
//! may connect to must be public: private, loopback, link-local, unique-local,
//! CGNAT, multicast, reserved and cloud-metadata addresses are refused unless
//! the configured allow-list (CIDRs) names them. The check runs twice:
//! on literal-IP URLs before sending ([`SsrfPolicy::check_url`]), and on every
//! resolved address at connect time ([`GuardedResolver`], plugged into
//! reqwest), so a hostname that resolves to 127.0.0.1 — or starts to after a
//! DNS change — is refused too. The HTTP client is built without proxies, so
//! nothing connects on the guard's behalf.
//!
//! The same policy says whether plain `http://` is acceptable at all
//! (`require_https`, the `delivery_require_https` setting): the merchant
//! onboarding checklist asks for "HTTPS with a valid certificate". While it
//! is on, new `http://` URLs are refused and merchants that still have one
//! are held: their deliveries wait, unsent and not failed, until the URL is
//! fixed ([`SsrfPolicy::holds`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SsrfError {
    #[error("the URL does not parse")]
    BadUrl,
    #[error("scheme {0:?} is not allowed (only http and https)")]
    Scheme(String),
    #[error("the URL has no host")]
    NoHost,
    #[error("address {0} is not public and not in the allow-list")]
    Forbidden(IpAddr),
    #[error("plain http is refused: merchant URLs must use https (delivery_require_https is on)")]
    PlainHttp,
}

/// Which non-public addresses are allowed anyway, and whether plain http is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsrfPolicy {
    pub allow: Vec<IpNet>,
    /// Refuse `http://` merchant URLs and hold deliveries to merchants that
    /// still have one.
    pub require_https: bool,
}

impl Default for SsrfPolicy {
    fn default() -> Self {
        SsrfPolicy { allow: Vec::new(), require_https: true }
    }
}

impl SsrfPolicy {
    /// No exceptions: only public addresses, only https.
    pub fn strict() -> Self {
        SsrfPolicy::default()
    }

    /// Parse an allow-list such as `["127.0.0.0/8", "::1/128"]` (https still required).
    pub fn allowing(cidrs: &[&str]) -> Result<Self, ipnet::AddrParseError> {
        Ok(SsrfPolicy { allow: cidrs.iter().map(|c| c.parse()).collect::<Result<_, _>>()?, require_https: true })
    }

    /// The same policy, accepting plain `http://` URLs too (the demo and
    /// tests whose receivers listen on loopback without TLS).
    pub fn plain_http_allowed(mut self) -> Self {
        self.require_https = false;
        self
    }

    /// Whether deliveries to `url` are held: https is required and the URL
    /// is plain http. Such a merchant was registered before the setting was
    /// on; its deliveries wait until an admin gives it an https URL.
    pub fn holds(&self, url: &str) -> bool {
        self.require_https && Url::parse(url).is_ok_and(|u| u.scheme() == "http")
    }

    pub fn is_allowed(&self, ip: IpAddr) -> bool {
        is_public(ip) || self.allow.iter().any(|net| net.contains(&ip))
    }

    /// Scheme check, and the address check for literal-IP hosts (which never
    /// go through the resolver).
    pub fn check_url(&self, url: &str) -> Result<Url, SsrfError> {
        let parsed = Url::parse(url).map_err(|_| SsrfError::BadUrl)?;
        match parsed.scheme() {
            "http" | "https" => {}
            other => return Err(SsrfError::Scheme(other.to_owned())),
        }
        let ip = match parsed.host() {
            None => return Err(SsrfError::NoHost),
            Some(Host::Domain(_)) => None,
            Some(Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
        };
        match ip {
            Some(ip) if !self.is_allowed(ip) => Err(SsrfError::Forbidden(ip)),
            _ if self.require_https && parsed.scheme() == "http" => Err(SsrfError::PlainHttp),
            _ => Ok(parsed),
        }
    }
}

/// True for globally routable unicast addresses.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return is_public_v4(v4);
            }
            let seg0 = v6.segments()[0];
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (seg0 & 0xfe00) == 0xfc00 // unique local fc00::/7 (incl. AWS fd00:ec2::254)
                || (seg0 & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (seg0 & 0xffc0) == 0xfec0 // site-local (deprecated) fec0::/10
                || (seg0 == 0x2001 && v6.segments()[1] == 0x0db8)) // documentation
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                   // "this network"
        || a == 10                             // private
        || a == 127                            // loopback
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10 (incl. 100.100.100.200 metadata)
        || (a == 169 && b == 254)              // link-local, incl. 169.254.169.254 metadata
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 168)              // private
        || (a == 192 && b == 0 && c == 0)      // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)      // documentation
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || (a == 198 && b == 51 && c == 100)   // documentation
        || (a == 203 && b == 0 && c == 113)    // documentation
        || a >= 224) // multicast, reserved, broadcast
}

/// The IPv4 address inside an IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible
/// or NAT64 (64:ff9b::/96) IPv6 address.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[0] == 0x0064 && s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0) {
        return Some(tail);
    }
    if s[..6].iter().all(|x| *x == 0) && !v6.is_loopback() && !v6.is_unspecified() {
        return Some(tail);
    }
    None
}

/// A reqwest resolver that drops every resolved address the policy forbids,
/// and fails when none is left.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<SsrfPolicy>,
}

impl GuardedResolver {
    pub fn new(policy: Arc<SsrfPolicy>) -> Self {
        GuardedResolver { policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (ok, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = resolved.into_iter().partition(|a| policy.is_allowed(a.ip()));
            if ok.is_empty() {
                let err: Box<dyn std::error::Error + Send + Sync> = match refused.first() {
                    Some(a) => Box::new(SsrfError::Forbidden(a.ip())),
                    None => format!("{host} resolved to no address").into(),
                };
                return Err(err);
            }
            let addrs: Addrs = Box::new(ok.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_literal_addresses_are_refused() {
        let strict = SsrfPolicy::strict();
        for url in [
            "http://127.0.0.1/hook",
            "http://10.1.2.3/",
            "http://172.20.0.1/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://100.100.100.200/",
            "http://100.64.0.1/",
            "http://0.0.0.0/",
            "http://[::1]/",
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://224.0.0.1/",
        ] {
            assert!(matches!(strict.check_url(url), Err(SsrfError::Forbidden(_))), "{url} must be refused");
        }
        assert!(strict.check_url("https://93.184.215.14/hook").is_ok());
        assert!(strict.check_url("https://[2606:4700::1111]/").is_ok());
        assert!(strict.check_url("https://merchant.example/hook").is_ok(), "hostnames are checked at connect time");
    }

    #[test]
    fn only_http_and_https_are_allowed() {
        let strict = SsrfPolicy::strict();
        assert_eq!(strict.check_url("file:///etc/passwd").err(), Some(SsrfError::Scheme("file".into())));
        assert_eq!(strict.check_url("gopher://x.example/").err(), Some(SsrfError::Scheme("gopher".into())));
        assert_eq!(strict.check_url("not a url").err(), Some(SsrfError::BadUrl));
    }

    #[test]
    fn plain_http_is_refused_and_held_only_while_https_is_required() {
        let strict = SsrfPolicy::strict();
        assert_eq!(strict.check_url("http://merchant.example/hook").err(), Some(SsrfError::PlainHttp));
        assert!(strict.check_url("HTTPS://merchant.example/hook").is_ok());
        assert!(strict.holds("http://merchant.example/hook"));
        assert!(!strict.holds("https://merchant.example/hook"));
        let lax = SsrfPolicy::strict().plain_http_allowed();
        assert!(lax.check_url("http://merchant.example/hook").is_ok());
        assert!(!lax.holds("http://merchant.example/hook"));
        let msg = SsrfError::PlainHttp.to_string();
        assert!(msg.contains("https") && msg.contains("delivery_require_https"), "{msg}");
    }

    #[test]
    fn the_allow_list_lets_named_ranges_through() {
        let p = SsrfPolicy::allowing(&["127.0.0.0/8"]).expect("cidr").plain_http_allowed();
        assert!(p.check_url("http://127.0.0.1:8080/").is_ok());
        assert!(p.check_url("http://10.0.0.1/").is_err());
        assert!(SsrfPolicy::allowing(&["nonsense"]).is_err());
    }

    #[tokio::test]
    async fn hostnames_resolving_to_loopback_are_refused_at_resolution() {
        let strict = GuardedResolver::new(Arc::new(SsrfPolicy::strict()));
        let err = match strict.resolve("localhost".parse().expect("name")).await {
            Ok(_) => panic!("localhost must be refused"),
            Err(e) => e,
        };
        assert!(err.to_string().contains("not public"), "{err}");
        let allowed = GuardedResolver::new(Arc::new(SsrfPolicy::allowing(&["127.0.0.0/8", "::1/128"]).expect("cidr")));
        let addrs: Vec<_> = allowed.resolve("localhost".parse().expect("name")).await.map_err(|e| e.to_string()).expect("allowed").collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
    }
}
