//! Which addresses the web tools may reach, and a connection pinned to the address checked.
//!
//! A URL is resolved first and *every* address it resolves to is checked; the request is then
//! made with the host pinned to exactly those addresses (reqwest `resolve_to_addrs`), so a DNS
//! answer that changes between the check and the connection (DNS rebinding) cannot send it
//! somewhere else. Redirects are not followed by the client: each hop is checked the same way.
//!
//! Clients that open connections on their own schedule (the MCP HTTP client reconnects, opens
//! a second connection for its event stream) use [`GuardedResolver`] instead: it is the
//! client's DNS resolver, so the addresses it checks are the very addresses the client connects
//! to, on every connection.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use url::{Host, Url};

use super::BuiltinConfig;
use agentry_tools::tool::ToolError;

/// Why an address is off limits, or `None` when it is a public unicast address.
pub fn forbidden_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some("unspecified (0.0.0.0/8)")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if a == 100 && (64..128).contains(&b) {
        Some("carrier-grade NAT (100.64.0.0/10)")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast() || a >= 240 {
        Some("reserved")
    } else if (a == 192 && b == 0 && (c == 0 || c == 2))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || (a == 198 && (18..20).contains(&b))
    {
        Some("reserved (IETF, documentation or benchmarking)")
    } else {
        None
    }
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let seg = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // Addresses that carry an IPv4 address: judge the IPv4 address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    if seg[..6] == [0, 0, 0, 0, 0, 0] {
        // IPv4-compatible (::a.b.c.d), deprecated but still routed by some stacks.
        let [a, b] = seg[6].to_be_bytes();
        let [c, d] = seg[7].to_be_bytes();
        return forbidden_v4(Ipv4Addr::new(a, b, c, d)).or(Some("reserved"));
    }
    if seg[0] == 0x64 && seg[1] == 0xff9b {
        // NAT64 (64:ff9b::/96 and the local-use 64:ff9b:1::/48).
        let [a, b] = seg[6].to_be_bytes();
        let [c, d] = seg[7].to_be_bytes();
        return forbidden_v4(Ipv4Addr::new(a, b, c, d));
    }
    if seg[0] == 0x2002 {
        // 6to4 embeds an IPv4 address in bits 16..48.
        let [a, b] = seg[1].to_be_bytes();
        let [c, d] = seg[2].to_be_bytes();
        return forbidden_v4(Ipv4Addr::new(a, b, c, d));
    }
    if seg[0] == 0x2001 && seg[1] == 0 {
        return Some("Teredo tunnel (2001::/32)");
    }
    if ip.is_unicast_link_local() || (seg[0] & 0xffc0) == 0xfec0 {
        return Some("link-local");
    }
    if ip.is_unique_local() {
        return Some("unique-local (fc00::/7)");
    }
    if ip.is_multicast() {
        return Some("multicast");
    }
    if seg[0] == 0x2001 && seg[1] == 0x0db8 {
        return Some("documentation (2001:db8::/32)");
    }
    if seg[0] == 0x0100 && seg[1..4] == [0, 0, 0] {
        return Some("discard-only (100::/64)");
    }
    None
}

/// A URL that passed the policy, with the addresses the connection must use.
#[derive(Debug, Clone)]
pub struct CheckedTarget {
    pub url: Url,
    /// The host name to pin (None for an IP literal, which needs no pinning).
    pub pinned_host: Option<String>,
    pub addrs: Vec<SocketAddr>,
}

/// Why the policy of `cfg` refuses `ip`, or `None` when it may be reached.
pub fn refusal(cfg: &BuiltinConfig, ip: IpAddr) -> Option<&'static str> {
    if cfg.allow_private_addresses || cfg.allowed_networks.iter().any(|n| n.contains(ip)) {
        return None;
    }
    forbidden_reason(ip)
}

/// A future of the addresses a name resolves to.
pub type Lookup = Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>;

/// How host names become addresses: the system resolver ([`SystemResolver`]) in the server;
/// tests inject their own so that no lookup leaves the machine.
pub trait HostResolver: Send + Sync + std::fmt::Debug + 'static {
    fn lookup(&self, host: &str, port: u16) -> Lookup;
}

/// The operating system's resolver (`getaddrinfo`: `/etc/hosts`, then DNS).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl HostResolver for SystemResolver {
    fn lookup(&self, host: &str, port: u16) -> Lookup {
        let host = host.to_string();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    }
}

/// Whether `domain` can be a DNS name at all: 1-63 characters per label, 253 in all. A name
/// that cannot be is refused before any resolver is asked.
fn valid_dns_name(domain: &str) -> bool {
    let name = domain.strip_suffix('.').unwrap_or(domain);
    !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|label| !label.is_empty() && label.len() <= 63)
}

/// Parse and check a URL the model gave: http(s) only, and every address the host resolves to
/// must be allowed by the policy of `cfg`.
pub async fn check_url(raw: &str, cfg: &BuiltinConfig) -> Result<CheckedTarget, ToolError> {
    check_url_with(raw, cfg, &SystemResolver).await
}

/// [`check_url`] with the resolver given.
pub async fn check_url_with(
    raw: &str,
    cfg: &BuiltinConfig,
    resolver: &dyn HostResolver,
) -> Result<CheckedTarget, ToolError> {
    let url = Url::parse(raw.trim())
        .map_err(|e| ToolError::invalid(format!("{raw:?} is not a valid URL: {e}")))?;
    check_parsed_with(url, cfg, resolver).await
}

pub async fn check_parsed(url: Url, cfg: &BuiltinConfig) -> Result<CheckedTarget, ToolError> {
    check_parsed_with(url, cfg, &SystemResolver).await
}

/// Why a host name cannot be used: it resolves to nothing (or not at all).
fn unresolvable(domain: &str, why: impl std::fmt::Display) -> ToolError {
    ToolError::Failed {
        message: format!("cannot resolve {domain}: {why}"),
        retryable: true,
    }
}

pub async fn check_parsed_with(
    url: Url,
    cfg: &BuiltinConfig,
    resolver: &dyn HostResolver,
) -> Result<CheckedTarget, ToolError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::invalid(format!(
            "only http and https URLs are supported, not {}:",
            url.scheme()
        )));
    }
    let port = url
        .port_or_known_default()
        .ok_or_else(|| ToolError::invalid("the URL has no port"))?;
    let (pinned_host, addrs): (Option<String>, Vec<SocketAddr>) = match url.host() {
        None => return Err(ToolError::invalid("the URL has no host")),
        Some(Host::Ipv4(ip)) => (None, vec![SocketAddr::new(IpAddr::V4(ip), port)]),
        Some(Host::Ipv6(ip)) => (None, vec![SocketAddr::new(IpAddr::V6(ip), port)]),
        Some(Host::Domain(domain)) => {
            let domain = domain.to_string();
            if !valid_dns_name(&domain) {
                return Err(ToolError::invalid(format!(
                    "{domain:?} is not a valid host name (each dot-separated label is 1-63 \
                     characters, the whole name at most 253)"
                )));
            }
            let addrs = resolver
                .lookup(&domain, port)
                .await
                .map_err(|e| unresolvable(&domain, e))?;
            if addrs.is_empty() {
                return Err(unresolvable(&domain, "it resolves to no address"));
            }
            (Some(domain), addrs)
        }
    };
    for addr in &addrs {
        if let Some(reason) = refusal(cfg, addr.ip()) {
            return Err(refused(
                url.host_str().unwrap_or_default(),
                addr.ip(),
                reason,
            ));
        }
    }
    Ok(CheckedTarget {
        url,
        pinned_host,
        addrs,
    })
}

fn refused(host: &str, ip: IpAddr, reason: &str) -> ToolError {
    ToolError::Refused(format!(
        "{host} resolves to {ip}, a {reason} address; requests to private networks are not \
         allowed (see AGENTRY_TOOLS__ALLOW_PRIVATE_ADDRESSES and AGENTRY_TOOLS__ALLOWED_NETWORKS)"
    ))
}

/// An HTTP client's DNS resolver that checks every address against the policy before the
/// client may connect to it: a name that resolves to a refused address fails to connect, and
/// since the check and the connection use one answer, a DNS answer that changes after the check
/// (rebinding) cannot redirect the client. IP literals never reach a resolver: check them with
/// [`check_url`] first, and follow redirects with [`GuardedResolver::redirect_policy`].
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<BuiltinConfig>,
    resolver: Arc<dyn HostResolver>,
}

impl GuardedResolver {
    /// The policy of `cfg` (`allow_private_addresses`, `allowed_networks`) over the system
    /// resolver.
    pub fn new(cfg: &BuiltinConfig) -> Self {
        Self::with_resolver(cfg, Arc::new(SystemResolver))
    }

    pub fn with_resolver(cfg: &BuiltinConfig, resolver: Arc<dyn HostResolver>) -> Self {
        Self {
            policy: Arc::new(cfg.clone()),
            resolver,
        }
    }

    /// Redirects the client may follow: at most 5, http(s) only, and not to an IP literal the
    /// policy refuses (names go through the resolver, which checks them).
    pub fn redirect_policy(&self) -> reqwest::redirect::Policy {
        let policy = self.policy.clone();
        reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("too many redirects");
            }
            let url = attempt.url();
            if !matches!(url.scheme(), "http" | "https") {
                let msg = format!("redirect to a {}: URL refused", url.scheme());
                return attempt.error(msg);
            }
            let literal = match url.host() {
                Some(Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
                Some(Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
                _ => None,
            };
            match literal.and_then(|ip| refusal(&policy, ip).map(|r| (ip, r))) {
                Some((ip, reason)) => {
                    let err = refused(&ip.to_string(), ip, reason);
                    attempt.error(err.to_string())
                }
                None => attempt.follow(),
            }
        })
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let resolver = self.resolver.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            // The port is the URL's: the client puts it on each address.
            let addrs = resolver.lookup(&host, 0).await?;
            if addrs.is_empty() {
                return Err(unresolvable(&host, "it resolves to no address").into());
            }
            for addr in &addrs {
                if let Some(reason) = refusal(&policy, addr.ip()) {
                    return Err(refused(&host, addr.ip(), reason).into());
                }
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A resolver for tests: answers from a script, one answer per lookup (the last one repeats),
/// and never asks the network. Also for the MCP client's tests (feature `testing`).
#[cfg(any(test, feature = "testing"))]
#[derive(Debug)]
pub struct ScriptedResolver {
    answers: std::sync::Mutex<std::collections::VecDeque<std::io::Result<Vec<IpAddr>>>>,
    lookups: std::sync::atomic::AtomicUsize,
}

#[cfg(any(test, feature = "testing"))]
impl ScriptedResolver {
    pub fn new(answers: Vec<std::io::Result<Vec<IpAddr>>>) -> Arc<Self> {
        Arc::new(Self {
            answers: std::sync::Mutex::new(answers.into()),
            lookups: Default::default(),
        })
    }

    pub fn lookups(&self) -> usize {
        self.lookups.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(any(test, feature = "testing"))]
impl HostResolver for ScriptedResolver {
    fn lookup(&self, _host: &str, port: u16) -> Lookup {
        self.lookups
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut answers = self.answers.lock().unwrap();
        let answer = if answers.len() > 1 {
            answers.pop_front().unwrap()
        } else {
            match answers.front().unwrap() {
                Ok(ips) => Ok(ips.clone()),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            }
        };
        let answer = answer.map(|ips| {
            ips.into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect()
        });
        Box::pin(async move { answer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn no_such_host() -> std::io::Error {
        std::io::Error::other("failed to lookup address information: Name or service not known")
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_refused() {
        let open = BuiltinConfig {
            allow_private_addresses: true,
            ..BuiltinConfig::default()
        };
        let dns = ScriptedResolver::new(vec![Err(no_such_host())]);
        let err = check_url_with("http://nowhere.test:9/mcp", &open, dns.as_ref())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ToolError::Failed { message, .. }
                if message.contains("cannot resolve nowhere.test") && message.contains("not known")),
            "{err:?}"
        );
        let empty = ScriptedResolver::new(vec![Ok(vec![])]);
        let err = check_url_with("http://empty.test:9/", &open, empty.as_ref())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("resolves to no address"), "{err}");
    }

    #[tokio::test]
    async fn names_that_cannot_be_dns_names_never_reach_a_resolver() {
        let dns = ScriptedResolver::new(vec![Ok(vec![v4("8.8.8.8")])]);
        let long_label = format!("http://{}.test:9/", "a".repeat(64));
        let long_name = format!("http://{}test:9/", "abcdefghi.".repeat(26));
        for url in [long_label.as_str(), long_name.as_str()] {
            let err = check_url_with(url, &BuiltinConfig::default(), dns.as_ref())
                .await
                .unwrap_err();
            assert!(
                matches!(&err, ToolError::InvalidArguments { message, .. } if message.contains("not a valid host name")),
                "{url}: {err:?}"
            );
        }
        assert_eq!(dns.lookups(), 0);
        // 63-character labels and a trailing dot are fine.
        let ok = format!("http://{}.test.:9/", "a".repeat(63));
        assert!(
            check_url_with(&ok, &BuiltinConfig::default(), dns.as_ref())
                .await
                .is_ok()
        );
    }

    /// The guard is the client's resolver: a name whose answer changes to a refused address
    /// after the check is refused at connection time, whatever the first answer was.
    #[tokio::test]
    async fn the_guarded_resolver_checks_the_answer_it_hands_out() {
        use reqwest::dns::Resolve;
        let cfg = BuiltinConfig {
            allowed_networks: vec!["127.0.0.2/32".parse().unwrap()],
            ..BuiltinConfig::default()
        };
        let dns = ScriptedResolver::new(vec![
            Ok(vec![v4("127.0.0.2")]),
            Ok(vec![v4("127.0.0.2"), v4("127.0.0.1")]),
            Err(no_such_host()),
        ]);
        let guard = GuardedResolver::with_resolver(&cfg, dns.clone());
        let name = |n: &str| n.parse::<reqwest::dns::Name>().unwrap();
        let first: Vec<SocketAddr> = guard.resolve(name("rebind.test")).await.unwrap().collect();
        assert_eq!(first, vec![SocketAddr::new(v4("127.0.0.2"), 0)]);
        // One refused address in the answer refuses the whole answer.
        let err = guard.resolve(name("rebind.test")).await.err().unwrap();
        assert!(
            err.to_string().contains("127.0.0.1, a loopback address"),
            "{err}"
        );
        let err = guard.resolve(name("rebind.test")).await.err().unwrap();
        assert!(err.to_string().contains("not known"), "{err}");
        assert_eq!(dns.lookups(), 3);
    }

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn private_and_special_addresses_are_forbidden() {
        for ip in [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "198.18.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "2001::1",
            "2001:db8::1",
            "fec0::1",
        ] {
            assert!(forbidden_reason(v4(ip)).is_some(), "{ip} was allowed");
        }
    }

    #[test]
    fn public_addresses_are_allowed() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
            "64:ff9b::808:808",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(forbidden_reason(v4(ip)), None, "{ip}");
        }
    }

    #[tokio::test]
    async fn loopback_hosts_are_refused_by_default_and_allowed_by_config() {
        for url in [
            "http://127.0.0.1:9/",
            "http://localhost:9/x",
            "http://[::1]:9/",
            "http://0x7f.1:9/",
        ] {
            let err = check_url(url, &BuiltinConfig::default()).await.unwrap_err();
            assert!(
                matches!(&err, ToolError::Refused(m) if m.contains("loopback")),
                "{url}: {err:?}"
            );
        }
        let open = BuiltinConfig {
            allow_private_addresses: true,
            ..BuiltinConfig::default()
        };
        let ok = check_url("http://localhost:9/x", &open).await.unwrap();
        assert_eq!(ok.pinned_host.as_deref(), Some("localhost"));
        assert!(
            ok.addrs
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 9)
        );
        // An allowed network opens just that network.
        let v4_loopback = BuiltinConfig {
            allowed_networks: vec!["127.0.0.0/8".parse().unwrap()],
            ..BuiltinConfig::default()
        };
        assert!(check_url("http://127.0.0.1:9/", &v4_loopback).await.is_ok());
        assert!(matches!(
            check_url("http://[::1]:9/", &v4_loopback).await,
            Err(ToolError::Refused(_))
        ));
        assert!(matches!(
            check_url("http://10.1.2.3:9/", &v4_loopback).await,
            Err(ToolError::Refused(_))
        ));
    }

    #[tokio::test]
    async fn non_http_urls_are_invalid() {
        for url in [
            "file:///etc/passwd",
            "ftp://example.com/",
            "gopher://x/",
            "not a url",
        ] {
            let open = BuiltinConfig {
                allow_private_addresses: true,
                ..BuiltinConfig::default()
            };
            assert!(
                matches!(
                    check_url(url, &open).await,
                    Err(ToolError::InvalidArguments { .. })
                ),
                "{url}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Every address in 10/8, 172.16/12, 192.168/16, 127/8, 169.254/16 and 100.64/10, in any
        /// IPv4 or IPv4-mapped IPv6 form, is refused.
        #[test]
        fn private_ranges_are_refused_in_every_form(
            range in 0usize..6, x in any::<u32>(),
        ) {
            let (base, bits): (u32, u32) = [
                (0x0a00_0000, 8), (0xac10_0000, 12), (0xc0a8_0000, 16),
                (0x7f00_0000, 8), (0xa9fe_0000, 16), (0x6440_0000, 10),
            ][range];
            let host_mask = u32::MAX >> bits;
            let ip = Ipv4Addr::from(base | (x & host_mask));
            prop_assert!(forbidden_reason(IpAddr::V4(ip)).is_some());
            prop_assert!(forbidden_reason(IpAddr::V6(ip.to_ipv6_mapped())).is_some());
        }
    }
}
