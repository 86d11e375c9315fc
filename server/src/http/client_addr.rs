//! The address a request comes from, for the sign-in throttle and the audit
//! log: the TCP peer, unless the peer is one of the `trusted_proxies`, in
//! which case `X-Forwarded-For` is read from the right, skipping the trusted
//! proxies' own hops, and the first address not among them is the client
//! (MDN, "X-Forwarded-For: Selecting an IP address"). The leftmost entries
//! are whatever the client wrote, so they are never believed on their own:
//! with no trusted proxies configured the header is ignored.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use ipnet::IpNet;
use sluice_app::ssr::auth::ClientAddr;

/// The layer: puts a [`ClientAddr`] into the request's extensions when the
/// server knows its peer (it always does when serving; router tests
/// without a socket get none).
pub async fn resolve(State(trusted): State<Arc<Vec<IpNet>>>, mut request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    if let Some(peer) = peer {
        let client = client_ip(peer, request.headers(), &trusted);
        request.extensions_mut().insert(ClientAddr(client));
    }
    next.run(request).await
}

/// The client's address as described in the module documentation.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    let mut client = peer.to_canonical();
    if !is_trusted(&client) {
        return client;
    }
    // Every X-Forwarded-For line, in order, as one list (RFC 9110 §5.3).
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for hop in hops.iter().rev() {
        // What does not parse was not written by a proxy we trust: the hop
        // to its right is as far as the chain can be followed.
        let Some(ip) = parse_hop(hop) else { break };
        client = ip;
        if !is_trusted(&client) {
            break;
        }
    }
    client
}

/// `203.0.113.7`, `2001:db8::1`, or either with a port (`[2001:db8::1]:443`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .or_else(|_| hop.parse::<SocketAddr>().map(|s| s.ip()))
        .ok()
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(values: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().expect("header"));
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn forwarded_addresses_count_only_behind_a_trusted_proxy() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let headers = xff(&["198.51.100.1, 203.0.113.7"]);
        // The peer is not a trusted proxy: the header is the client's own word.
        assert_eq!(client_ip(ip("192.0.2.5"), &headers, &trusted), ip("192.0.2.5"));
        assert_eq!(client_ip(ip("10.1.2.3"), &headers, &[]), ip("10.1.2.3"));
        // Behind the proxy: the rightmost address it did not add itself.
        assert_eq!(client_ip(ip("10.1.2.3"), &headers, &trusted), ip("203.0.113.7"));
        // A chain of trusted proxies is skipped, over several header lines.
        let chain = xff(&["198.51.100.1, 203.0.113.7", "10.9.9.9"]);
        assert_eq!(client_ip(ip("10.1.2.3"), &chain, &trusted), ip("203.0.113.7"));
        // Junk stops the walk at the last trusted hop; ports and IPv4-mapped
        // IPv6 addresses are read as the address.
        assert_eq!(client_ip(ip("10.1.2.3"), &xff(&["203.0.113.7, junk, 10.0.0.1"]), &trusted), ip("10.0.0.1"));
        assert_eq!(client_ip(ip("10.1.2.3"), &xff(&["[2001:db8::1]:443"]), &trusted), ip("2001:db8::1"));
        assert_eq!(client_ip(ip("::ffff:10.1.2.3"), &xff(&["::ffff:203.0.113.7"]), &trusted), ip("203.0.113.7"));
        // No header: the proxy itself.
        assert_eq!(client_ip(ip("10.1.2.3"), &HeaderMap::new(), &trusted), ip("10.1.2.3"));
    }
}
