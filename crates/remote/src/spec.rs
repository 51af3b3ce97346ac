//! A remote engine as the user names it: `NAME=URL[,KEY]` on the command line, or the same three
//! fields from Settings.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::RemoteError;

/// Longest name and key taken.
const MAX_NAME: usize = 64;
const MAX_KEY: usize = 4096;

/// Addresses where clouds answer with their machines' metadata (credentials among it) that are
/// not link-local: Alibaba Cloud's, and AWS's over IPv6.
const METADATA_V4: [Ipv4Addr; 1] = [Ipv4Addr::new(100, 100, 100, 200)];
const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)];

/// Which addresses remote engines may be reached at beyond the usual ones (loopback, private
/// networks and public hosts are always allowed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteAccess {
    /// Link-local addresses (169.254.0.0/16, fe80::/10) and cloud metadata services. Refused by
    /// default, so that whoever may add a remote engine cannot make the server read a cloud
    /// machine's credentials.
    pub allow_link_local: bool,
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSpec {
    /// How runs and menus name it: letters, digits, `.`, `_` and `-`.
    pub name: String,
    /// The server's base address, such as `http://gpu-box:8000` (a trailing `/v1` is taken off).
    pub url: String,
    /// Sent as `Authorization: Bearer KEY` when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

// The key never reaches logs.
impl fmt::Debug for RemoteSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteSpec")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "…"))
            .finish()
    }
}

impl RemoteSpec {
    /// Checks the fields and puts the address in its base form.
    pub fn new(
        name: impl Into<String>,
        url: impl Into<String>,
        api_key: Option<String>,
    ) -> Result<Self, RemoteError> {
        let name = name.into().trim().to_owned();
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(invalid(format!(
                "a name has 1 to {MAX_NAME} characters, got {}",
                name.len()
            )));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(invalid(format!(
                "'{name}' has '{bad}': a name has letters, digits, '.', '_' and '-' only"
            )));
        }
        // The history's filter names the model served here so.
        if name == "local" {
            return Err(invalid(
                "'local' names the model served here; choose another name".to_owned(),
            ));
        }
        let url = base_url(url.into().trim())?;
        let api_key = api_key
            .map(|k| k.trim().to_owned())
            .filter(|k| !k.is_empty());
        if let Some(key) = &api_key {
            if key.len() > MAX_KEY || key.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(invalid(
                    "an API key is one word of at most 4096 characters".to_owned(),
                ));
            }
        }
        Ok(Self { name, url, api_key })
    }

    /// Whether `access` lets the server reach this engine's address as written. Host names are
    /// checked again as they resolve (see [`is_link_local_or_metadata`]).
    pub fn check_access(&self, access: RemoteAccess) -> Result<(), RemoteError> {
        if access.allow_link_local {
            return Ok(());
        }
        let Some(ip) = host_ip(&self.url) else {
            return Ok(());
        };
        if is_link_local_or_metadata(ip) {
            return Err(invalid(format!(
                "'{}' is a link-local or cloud metadata address, which remote engines may not \
                 have unless the server is started with --allow-link-local-remotes",
                self.url
            )));
        }
        Ok(())
    }
}

/// The IP address an engine's base URL names, if it names one rather than a host name. Read as
/// the HTTP client reads it, so `http://2852039166` is 169.254.169.254 here as there.
fn host_ip(url: &str) -> Option<IpAddr> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.parse().ok()
}

/// Link-local addresses (IPv4 169.254.0.0/16, IPv6 fe80::/10) and known cloud metadata
/// addresses, and IPv6 addresses that carry such an IPv4 address (see [`embedded_ipv4`]).
pub fn is_link_local_or_metadata(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_link_local_or_metadata_v4(v4),
        IpAddr::V6(v6) => {
            (v6.segments()[0] & 0xffc0) == 0xfe80
                || METADATA_V6.contains(&v6)
                || embedded_ipv4(v6)
                    .into_iter()
                    .flatten()
                    .any(is_link_local_or_metadata_v4)
        }
    }
}

fn is_link_local_or_metadata_v4(v4: Ipv4Addr) -> bool {
    v4.is_link_local() || METADATA_V4.contains(&v4)
}

/// The IPv4 addresses an IPv6 address carries in one of the standard forms that reach them
/// (or are routed towards them) from an IPv6 socket, each to be checked as the IPv4 address
/// itself would be:
/// - IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d` and SIIT's IPv4-translated
///   `::ffff:0:a.b.c.d` (RFC 6145) (the last 32 bits);
/// - NAT64 `64:ff9b::a.b.c.d` (RFC 6052's well-known /96 prefix, the last 32 bits), and NAT64's
///   local-use `64:ff9b:1::/48` (RFC 8215), whose operator picks the prefix length: the address
///   where a /48, /56, /64 or /96 prefix would put it (RFC 6052, section 2.2);
/// - 6to4 `2002:AABB:CCDD::/48` (RFC 3056, bits 16 to 48);
/// - Teredo `2001:0::/32` (RFC 4380): its server in bits 32 to 64, and its client in the last
///   32 bits, inverted.
fn embedded_ipv4(v6: Ipv6Addr) -> [Option<Ipv4Addr>; 4] {
    let bits = u128::from(v6);
    let low32 = Some(Ipv4Addr::from(bits as u32));
    let segments = v6.segments();
    if matches!(
        bits >> 32,
        0 | 0xffff | 0xffff_0000 | 0x0064_ff9b_0000_0000_0000_0000
    ) {
        return [low32, None, None, None];
    }
    if bits >> 80 == 0x0064_ff9b_0001 {
        return [48, 56, 64, 96].map(|prefix| Some(rfc6052_ipv4(bits, prefix)));
    }
    match segments[..2] {
        [0x2002, _] => [Some(Ipv4Addr::from((bits >> 80) as u32)), None, None, None],
        [0x2001, 0] => [
            Some(Ipv4Addr::from((bits >> 64) as u32)),
            Some(Ipv4Addr::from(!(bits as u32))),
            None,
            None,
        ],
        _ => [None; 4],
    }
}

/// The IPv4 address that an IPv4-embedded IPv6 address with a prefix of `prefix` bits (48, 56,
/// 64 or 96) carries: RFC 6052 puts it right after the prefix, skipping bits 64 to 72.
fn rfc6052_ipv4(bits: u128, prefix: u32) -> Ipv4Addr {
    // The address without bits 64 to 72: 120 bits, the IPv4 address at `prefix` from the top.
    let without_u = ((bits >> 64) << 56) | (bits & ((1 << 56) - 1));
    let from_top = if prefix >= 72 { prefix - 8 } else { prefix };
    Ipv4Addr::from((without_u >> (120 - 32 - from_top)) as u32)
}

/// `NAME=URL[,KEY]`.
impl FromStr for RemoteSpec {
    type Err = RemoteError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, rest) = text.split_once('=').ok_or_else(|| {
            invalid(format!(
                "'{text}' is not NAME=URL[,KEY] (such as lab=http://gpu-box:8000)"
            ))
        })?;
        let (url, key) = match rest.split_once(',') {
            Some((url, key)) => (url, Some(key.to_owned())),
            None => (rest, None),
        };
        Self::new(name, url, key)
    }
}

/// `http(s)://host[:port][/path]` without a trailing `/` or `/v1`, no query or fragment. HTTPS
/// certificates are checked against the system's trusted roots.
fn base_url(url: &str) -> Result<String, RemoteError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid(format!(
            "'{url}' is not an address such as http://gpu-box:8000"
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(invalid(format!(
            "'{url}' uses '{scheme}': remote engines are reached over http or https"
        )));
    }
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || rest.contains(['?', '#', ' ']) || host.contains('@') {
        return Err(invalid(format!(
            "'{url}' is not an address such as http://gpu-box:8000 (no user, query or spaces)"
        )));
    }
    check_port(url, host)?;
    let mut base = format!("{scheme}://{}", rest.trim_end_matches('/'));
    if let Some(stripped) = base.strip_suffix("/v1") {
        base = stripped.to_owned();
    }
    // The HTTP client must read it as an address too (a host it can name, digits in range).
    if reqwest::Url::parse(&base).is_err() {
        return Err(invalid(format!(
            "'{url}' is not an address such as http://gpu-box:8000"
        )));
    }
    Ok(base)
}

/// The port written after the host (`host:port`, `[v6]:port`), if any, is 1 to 65535.
fn check_port(url: &str, authority: &str) -> Result<(), RemoteError> {
    let after_host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or("", |(_, rest)| rest),
        None => authority.find(':').map_or("", |at| &authority[at..]),
    };
    let Some(port) = after_host.strip_prefix(':') else {
        return Ok(());
    };
    match port.parse::<u16>() {
        Ok(1..) if port.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
        _ => Err(invalid(format!(
            "'{url}' has the port '{port}': a port is a number from 1 to 65535"
        ))),
    }
}

fn invalid(message: String) -> RemoteError {
    RemoteError::InvalidSpec(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_name_url_and_key() {
        let spec: RemoteSpec = "lab=http://gpu-box:8000/v1/,sk-123".parse().unwrap();
        assert_eq!(spec.name, "lab");
        assert_eq!(spec.url, "http://gpu-box:8000");
        assert_eq!(spec.api_key.as_deref(), Some("sk-123"));
        let spec: RemoteSpec = "vllm.1=HTTP://10.0.0.2:8000/proxy".parse().unwrap();
        assert_eq!(spec.url, "http://10.0.0.2:8000/proxy");
        let spec: RemoteSpec = "cloud=https://api.example.com/v1".parse().unwrap();
        assert_eq!(spec.url, "https://api.example.com");
        assert_eq!(spec.api_key, None);
        // An empty key is no key.
        let spec: RemoteSpec = "x=http://h:1,".parse().unwrap();
        assert_eq!(spec.api_key, None);
    }

    #[test]
    fn refuses_what_is_not_an_engine_address() {
        for bad in [
            "http://h:1",
            "=http://h:1",
            "a b=http://h:1",
            "lab=gpu-box:8000",
            "lab=ftp://h",
            "lab=http://",
            "lab=http://user:pw@h:1",
            "lab=http://h:1/?x=1",
            "lab=http://h:1,two words",
            "local=http://h:1",
            "lab=http://h:99999",
            "lab=http://h:0",
            "lab=http://h:",
            "lab=http://h:+80",
            "lab=http://[::1]:70000",
            "lab=http://h:8000:1",
        ] {
            let err = bad.parse::<RemoteSpec>().unwrap_err();
            assert_eq!(err.code(), "invalid_remote", "{bad}");
        }
        let long = format!("{}=http://h:1", "n".repeat(65));
        assert!(long.parse::<RemoteSpec>().is_err());
    }

    #[test]
    fn ports_are_1_to_65535_and_said_so() {
        let err = "lab=http://h:99999".parse::<RemoteSpec>().unwrap_err();
        assert!(err.to_string().contains("1 to 65535"), "{err}");
        for good in [
            "lab=http://h:1",
            "lab=http://h:65535",
            "lab=http://[::1]:8000/v1",
        ] {
            good.parse::<RemoteSpec>().unwrap();
        }
    }

    #[test]
    fn link_local_and_metadata_addresses_need_the_allowance() {
        let refuse = RemoteAccess::default();
        let allow = RemoteAccess {
            allow_link_local: true,
        };
        for url in [
            "http://169.254.169.254/latest/meta-data",
            "http://169.254.0.1:8000",
            // The same address as a number and in hex, as HTTP clients read them.
            "http://2852039166",
            "http://0xa9fea9fe",
            "http://[fe80::1]:8000",
            "http://[::ffff:169.254.169.254]",
            "http://[64:ff9b::a9fe:a9fe]",
            "http://[fd00:ec2::254]",
            "http://100.100.100.200",
        ] {
            let spec = RemoteSpec::new("lab", url, None).unwrap();
            let err = spec.check_access(refuse).unwrap_err();
            assert_eq!(err.code(), "invalid_remote", "{url}");
            assert!(
                err.to_string().contains("--allow-link-local-remotes"),
                "{err}"
            );
            spec.check_access(allow).unwrap();
        }
        for url in [
            "http://127.0.0.1:8080",
            "http://10.0.0.2:8000",
            "http://[::1]:8000",
            "http://gpu-box:8000",
            "https://api.example.com",
        ] {
            let spec = RemoteSpec::new("lab", url, None).unwrap();
            spec.check_access(refuse).unwrap();
        }
    }

    #[test]
    fn ipv4_addresses_carried_in_ipv6_are_found() {
        for (v6, expected) in [
            ("::ffff:169.254.169.254", &["169.254.169.254"][..]),
            ("::169.254.169.254", &["169.254.169.254"]),
            ("::a9fe:a9fe", &["169.254.169.254"]),
            ("::1", &["0.0.0.1"]),
            ("::ffff:0:169.254.169.254", &["169.254.169.254"]),
            ("64:ff9b::10.1.2.3", &["10.1.2.3"]),
            // NAT64's local-use /48: where each prefix length would put the address.
            (
                "64:ff9b:1:a9fe:a9:fe00::",
                &["169.254.169.254", "254.169.254.0", "169.254.0.0", "0.0.0.0"],
            ),
            (
                "64:ff9b:1::a9fe:a9fe",
                &["0.0.0.0", "0.0.0.0", "0.0.0.169", "169.254.169.254"],
            ),
            ("2002:a9fe:a9fe::", &["169.254.169.254"]),
            ("2002:6464:64c8:1:2:3:4:5", &["100.100.100.200"]),
            // Teredo: server 65.54.227.120, client 169.254.169.254 (inverted).
            (
                "2001:0:4136:e378:8000:63bf:5601:5601",
                &["65.54.227.120", "169.254.169.254"],
            ),
            ("2001:db8::a9fe:a9fe", &[]),
            ("2001:1::a9fe:a9fe", &[]),
            ("64:ff9b:2::a9fe:a9fe", &[]),
            ("fe80::1", &[]),
        ] {
            let parsed: Ipv6Addr = v6.parse().unwrap();
            let found: Vec<Ipv4Addr> = embedded_ipv4(parsed).into_iter().flatten().collect();
            let expected: Vec<Ipv4Addr> = expected.iter().map(|a| a.parse().unwrap()).collect();
            assert_eq!(found, expected, "{v6}");
        }
    }

    #[test]
    fn link_local_addresses_inside_ipv6_are_refused() {
        let refuse = RemoteAccess::default();
        for url in [
            // IPv4-compatible.
            "http://[::169.254.169.254]/",
            "http://[::a9fe:1]:8000",
            // IPv4-mapped.
            "http://[::ffff:a9fe:a9fe]",
            // SIIT's IPv4-translated form.
            "http://[::ffff:0:169.254.169.254]",
            // NAT64.
            "http://[64:ff9b::169.254.169.254]",
            "http://[64:ff9b::100.100.100.200]",
            // NAT64's local-use prefix, as a /48, /56, /64 and /96.
            "http://[64:ff9b:1:a9fe:a9:fe00::]",
            "http://[64:ff9b:1:a9:fe:a9fe::]",
            "http://[64:ff9b:1:0:a9:fea9:fe00:0]",
            "http://[64:ff9b:1::169.254.169.254]",
            // 6to4.
            "http://[2002:a9fe:a9fe::]/",
            "http://[2002:a9fe:1::1]",
            "http://[2002:6464:64c8::1]",
            // Teredo, with the link-local address as client or as server.
            "http://[2001:0:4136:e378:8000:63bf:5601:5601]",
            "http://[2001:0:a9fe:a9fe::1]",
        ] {
            let spec = RemoteSpec::new("lab", url, None).unwrap();
            let err = spec.check_access(refuse).unwrap_err();
            assert_eq!(err.code(), "invalid_remote", "{url}");
            assert!(
                is_link_local_or_metadata(host_ip(&spec.url).unwrap()),
                "{url}"
            );
        }
        // The same forms around ordinary addresses are what they carry: allowed.
        for url in [
            "http://[::10.0.0.2]:8000",
            "http://[::ffff:127.0.0.1]:8000",
            "http://[64:ff9b::8.8.8.8]",
            "http://[2002:0a00:0002::1]",
            "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
            "http://[2001:db8::a9fe:a9fe]",
        ] {
            let spec = RemoteSpec::new("lab", url, None).unwrap();
            assert!(spec.check_access(refuse).is_ok(), "{url}");
        }
    }

    #[test]
    fn debug_hides_the_key() {
        let spec: RemoteSpec = "lab=http://h:1,secret-key".parse().unwrap();
        assert!(!format!("{spec:?}").contains("secret-key"));
    }
}
