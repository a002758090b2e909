//! [`BuiltinConfig`]: the limits and switches of the built-in tools.
//!
//! The gateway reads it from the `[tools]` section of `agentry.toml` and from `AGENTRY_TOOLS__*`
//! environment keys (`AGENTRY_TOOLS__READ_MAX_BYTES=2097152`). Every field has a default, so an
//! empty section is a working configuration.

use std::net::IpAddr;
use std::str::FromStr;

use agentry_schema::secret::Secret;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Limits and switches of the built-in tools. See `docs/tools.md` for what each one governs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BuiltinConfig {
    // --- files ---
    /// `read_file` refuses a whole-file read of a bigger file (a ranged read still works) and
    /// never returns more than this many bytes.
    pub read_max_bytes: u64,
    /// The largest content one `write_file` / `edit_file` may produce.
    pub write_max_bytes: u64,
    /// `list_directory` stops after this many entries.
    pub list_max_entries: usize,
    /// `glob` stops after this many matches.
    pub glob_max_results: usize,
    /// `grep` stops after this many matching lines.
    pub grep_max_results: usize,
    /// `grep` skips files bigger than this.
    pub grep_max_file_bytes: u64,
    /// The unified diff in a `file_operation` event is cut at this many bytes.
    pub diff_max_bytes: usize,

    // --- shell ---
    /// Default timeout of `execute` when the call names none.
    pub shell_timeout_secs: u64,
    /// The largest timeout a call may ask for.
    pub shell_max_timeout_secs: u64,
    /// stdout + stderr kept per call; the rest is dropped with a note.
    pub shell_output_cap_bytes: usize,
    /// Environment variables passed from the server's environment to commands. Everything
    /// else is cleared so the server's secrets never reach a command.
    pub shell_env_passthrough: Vec<String>,

    // --- web ---
    pub http_timeout_secs: u64,
    /// Response bodies are cut at this many bytes.
    pub http_body_cap_bytes: usize,
    /// Redirects followed per request; every hop is checked like the first URL.
    pub http_max_redirects: usize,
    /// `fetch_url` returns at most this many characters of text.
    pub fetch_max_chars: usize,
    /// Allow requests to loopback, private, link-local, unique-local and CGNAT addresses.
    /// Off by default: a tool must not become a way into the server's own network.
    pub allow_private_addresses: bool,
    /// Networks reachable even though they are private (`["10.20.0.0/16", "fd00:1::/64"]`):
    /// an internal API can be opened without opening the whole private address space.
    pub allowed_networks: Vec<Cidr>,
    pub user_agent: String,
    /// Key of a Tavily-compatible search API; `web_search` is registered only when it is set.
    pub search_api_key: Secret,
    /// Base URL of the search API (`{base}/search`).
    pub search_base_url: String,
    pub search_max_results: u32,

    // --- system, services ---
    /// Processes listed by `get_system_stats` when the call asks for them and names no limit.
    pub system_max_processes: usize,
    /// The `systemctl` program the services tools run.
    pub systemctl_path: String,
    pub service_timeout_secs: u64,

    // --- todos, interaction ---
    pub todos_max_items: usize,
    /// How long a question waits for the user when the call names no timeout.
    pub question_timeout_secs: u64,
    /// The longest wait a call may ask for.
    pub question_max_timeout_secs: u64,
    /// How long an interaction tool may take besides waiting for the user: its timeout clock
    /// stands still while the question waits (the wait is bounded by the question's own
    /// timeout), so this only bounds the tool's own work.
    pub interaction_timeout_secs: u64,

    // --- agentry tool-server ---
    /// Workspace quota of `agentry tool-server` (in a session the tenant's quota applies).
    pub tool_server_quota_bytes: u64,

    /// Where `execute` runs its commands: set up from the `[sandbox]` section at start. The
    /// default refuses to run anything.
    #[serde(skip)]
    pub sandbox: agentry_sandbox::SandboxHandle,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        Self {
            read_max_bytes: 1024 * 1024,
            write_max_bytes: 10 * 1024 * 1024,
            list_max_entries: 1000,
            glob_max_results: 1000,
            grep_max_results: 200,
            grep_max_file_bytes: 4 * 1024 * 1024,
            diff_max_bytes: 64 * 1024,
            shell_timeout_secs: 60,
            shell_max_timeout_secs: 600,
            shell_output_cap_bytes: 64 * 1024,
            shell_env_passthrough: ["PATH", "LANG", "LC_ALL", "TZ"]
                .into_iter()
                .map(String::from)
                .collect(),
            http_timeout_secs: 30,
            http_body_cap_bytes: 1024 * 1024,
            http_max_redirects: 5,
            fetch_max_chars: 100_000,
            allow_private_addresses: false,
            allowed_networks: Vec::new(),
            user_agent: concat!("agentry/", env!("CARGO_PKG_VERSION")).to_string(),
            search_api_key: Secret::default(),
            search_base_url: "https://api.tavily.com".to_string(),
            search_max_results: 5,
            system_max_processes: 10,
            systemctl_path: "systemctl".to_string(),
            service_timeout_secs: 30,
            todos_max_items: 100,
            question_timeout_secs: 300,
            question_max_timeout_secs: 3600,
            interaction_timeout_secs: 30,
            tool_server_quota_bytes: 1024 * 1024 * 1024,
            sandbox: agentry_sandbox::SandboxHandle::default(),
        }
    }
}

/// A network in CIDR notation: `10.0.0.0/8`, `::1/128`, or a single address. An [`IpNet`] that
/// keeps our config syntax (a bare address is its own network) and error messages, and lets an
/// IPv4 network match the IPv4-mapped IPv6 form of its addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cidr(IpNet);

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.0, ip) {
            (IpNet::V4(net), IpAddr::V6(v6)) => {
                v6.to_ipv4_mapped().is_some_and(|v4| net.contains(&v4))
            }
            (net, ip) => net.contains(&ip),
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not a network: {addr:?} is not an IP address"))?;
        let Some(prefix) = prefix else {
            return Ok(Self(IpNet::from(addr)));
        };
        prefix
            .parse::<u8>()
            .ok()
            .and_then(|p| IpNet::new(addr, p).ok())
            .map(Self)
            .ok_or_else(|| {
                let max = if addr.is_ipv4() { 32 } else { 128 };
                format!("{s:?} is not a network: the prefix must be 0..={max}")
            })
    }
}

impl TryFrom<String> for Cidr {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Cidr> for String {
    fn from(c: Cidr) -> String {
        c.0.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_parse_and_match() {
        let net: Cidr = "10.20.0.0/16".parse().unwrap();
        assert!(net.contains("10.20.3.4".parse().unwrap()));
        assert!(!net.contains("10.21.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.20.0.9".parse().unwrap()));
        let one: Cidr = "::1".parse().unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(!one.contains("::2".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert_eq!(
            "nope/8".parse::<Cidr>().unwrap_err(),
            r#""nope/8" is not a network: "nope" is not an IP address"#
        );
        assert_eq!(
            "::/129".parse::<Cidr>().unwrap_err(),
            r#""::/129" is not a network: the prefix must be 0..=128"#
        );
        // Host bits are kept as written and still match their network; the text round-trips.
        let host: Cidr = "10.20.3.4/16".parse().unwrap();
        assert!(host.contains("10.20.200.1".parse().unwrap()));
        assert_eq!(String::from(host), "10.20.3.4/16");
        assert_eq!(String::from(one), "::1/128");
        // An IPv6 network never matches an IPv4 address.
        let v6all: Cidr = "::/0".parse().unwrap();
        assert!(!v6all.contains("1.2.3.4".parse().unwrap()));
        let err =
            serde_json::from_value::<BuiltinConfig>(serde_json::json!({"allowed_networks": ["x"]}))
                .unwrap_err();
        assert!(err.to_string().contains("not a network"), "{err}");
    }

    #[test]
    fn an_empty_section_gives_the_defaults() {
        let cfg: BuiltinConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(cfg, BuiltinConfig::default());
        assert_eq!(cfg.read_max_bytes, 1_048_576);
        assert_eq!(cfg.question_timeout_secs, 300);
        assert!(!cfg.allow_private_addresses);
        assert!(cfg.search_api_key.is_empty());
    }

    #[test]
    fn keys_override_one_by_one_and_the_search_key_never_prints() {
        let cfg: BuiltinConfig = serde_json::from_value(serde_json::json!({
            "shell_timeout_secs": 5,
            "search_api_key": "tvly-secret",
        }))
        .unwrap();
        assert_eq!(cfg.shell_timeout_secs, 5);
        assert_eq!(cfg.http_timeout_secs, 30);
        assert_eq!(cfg.search_api_key.expose(), "tvly-secret");
        assert!(!format!("{cfg:?}").contains("tvly-secret"));
    }
}
