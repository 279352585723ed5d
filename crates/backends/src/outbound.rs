//! Where joch's outbound calls may never go: link-local addresses and the
//! cloud metadata services, whatever a tool's URL says. A tool that could
//! reach `169.254.169.254` could hand the model the host's cloud
//! credentials. Names are checked after DNS resolution (a resolver that
//! drops such addresses), literal addresses before connecting.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Addresses no tool may reach.
pub fn forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local() // 169.254.0.0/16: AWS, GCP, Azure metadata among them
                || v4 == Ipv4Addr::new(100, 100, 100, 200) // Alibaba Cloud metadata
        }
        IpAddr::V6(v6) => {
            (v6.segments()[0] & 0xffc0) == 0xfe80 // fe80::/10, link-local
                || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) // AWS metadata over IPv6
                || v6.to_ipv4_mapped().is_some_and(|v4| forbidden(IpAddr::V4(v4)))
        }
    }
}

/// Refuses a URL whose host is a forbidden literal address.
pub fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    let literal = parsed
        .host_str()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
        .and_then(|h| h.parse::<IpAddr>().ok());
    match literal {
        Some(ip) if forbidden(ip) => Err(refusal(&ip.to_string())),
        _ => Ok(()),
    }
}

fn refusal(target: &str) -> String {
    format!("{target} is a link-local or cloud-metadata address; joch never calls it")
}

/// The system resolver, minus forbidden addresses: a name that resolves
/// only to them fails to resolve.
#[derive(Debug, Default)]
pub struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|addr| !forbidden(addr.ip()))
                .collect();
            if found.is_empty() {
                return Err(refusal(&format!("{host} resolves only to an address that")).into());
            }
            let addrs: Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

/// A client builder with the guard and no redirects: every outbound client starts here.
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(GuardedResolver))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_and_link_local_addresses_are_forbidden() {
        for ip in [
            "169.254.169.254",
            "169.254.0.1",
            "100.100.100.200",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
        ] {
            assert!(
                forbidden(ip.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))),
                "{ip}"
            );
        }
        for ip in ["127.0.0.1", "10.0.0.1", "8.8.8.8", "::1", "2001:db8::1"] {
            assert!(
                !forbidden(
                    ip.parse()
                        .unwrap_or(IpAddr::V4(Ipv4Addr::new(169, 254, 1, 1)))
                ),
                "{ip}"
            );
        }
    }

    #[test]
    fn literal_urls_are_checked() {
        assert!(check_url("http://169.254.169.254/latest/meta-data/").is_err());
        assert!(check_url("http://[fe80::1]:8080/x").is_err());
        assert!(check_url("http://127.0.0.1:9/x").is_ok());
        assert!(check_url("https://api.example.com/x").is_ok());
    }
}
