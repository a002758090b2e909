//! A data source's URL: what a tenant may register, and where a connection may go.
//!
//! A URL is tenant input, so it is checked twice — when it is registered and again before
//! every connection (a name may resolve elsewhere later):
//! - **PostgreSQL / MySQL / MariaDB** (`postgres://`, `postgresql://`, `mysql://`,
//!   `mariadb://`): the host is resolved and every address must pass the platform's network
//!   rule (the web tools' rule: private, loopback, link-local, … refused unless
//!   `tools.allowed_networks` allows them); the connection goes to the checked address, never to
//!   a second lookup. An address of the platform's own services (its database, its Redis) is
//!   refused whatever the rule says — on this host any local address with that port counts, as
//!   a server listening on all interfaces answers on each. Only a few query parameters are
//!   accepted (TLS mode, application name): the rest could point the driver at local files or
//!   sockets. User, password and database names may not hold control characters (a
//!   cross-protocol payload for a line-based server).
//! - **SQLite** (`sqlite:<path>`): a file inside the tenant's own area
//!   (`{data_dir}/workspaces/{tenant}/`, its users' workspaces), relative to it or absolute
//!   within it. It is opened beneath that directory (no `..`, no symlink out: `openat` with
//!   `RESOLVE_BENEATH` semantics), and SQLite reads it through that open file, read-only.

use std::net::{IpAddr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use url::Url;

use crate::error::{DataError, Result};

/// The kinds of database a data source may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Postgres,
    Mysql,
    Sqlite,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Postgres => "postgres",
            Engine::Mysql => "mysql",
            Engine::Sqlite => "sqlite",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Engine::Postgres => 5432,
            Engine::Mysql => 3306,
            Engine::Sqlite => 0,
        }
    }
}

/// A future of the addresses a host name resolves to.
pub type Lookup = Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>;

/// How host names become addresses (the system resolver in the server).
pub trait Resolve: Send + Sync + std::fmt::Debug {
    fn lookup(&self, host: &str, port: u16) -> Lookup;
}

/// The operating system's resolver.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolve;

impl Resolve for SystemResolve {
    fn lookup(&self, host: &str, port: u16) -> Lookup {
        let host = host.to_string();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    }
}

/// Why an address may not be reached (`None`: it may).
pub type Refusal = Arc<dyn Fn(IpAddr) -> Option<&'static str> + Send + Sync>;

/// Where data sources may connect: the platform's network rule, its own services' addresses,
/// and the directory tenants' SQLite files live under.
#[derive(Clone)]
pub struct NetPolicy {
    /// The network rule of the web tools (`net_guard::refusal` with `tools.allowed_networks`).
    pub refusal: Refusal,
    /// The platform's own database and Redis, resolved at start: never reachable.
    pub platform_endpoints: Vec<SocketAddr>,
    /// `{data_dir}/workspaces`: tenant `t`'s SQLite files live under `…/workspaces/t/`.
    pub workspaces: PathBuf,
    pub resolver: Arc<dyn Resolve>,
}

impl std::fmt::Debug for NetPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetPolicy")
            .field("platform_endpoints", &self.platform_endpoints)
            .field("workspaces", &self.workspaces)
            .finish_non_exhaustive()
    }
}

/// The parsed URL of a data source (credentials included: keep it sealed, show
/// [`SourceUrl::redacted`]).
#[derive(Clone, PartialEq, Eq)]
pub enum SourceUrl {
    Server { engine: Engine, url: Url },
    Sqlite { path: PathBuf },
}

impl std::fmt::Debug for SourceUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Query parameters a server URL may carry, per engine, with the values allowed.
const PG_PARAMS: &[(&str, &[&str])] = &[
    ("sslmode", &["disable", "allow", "prefer", "require"]),
    ("application_name", &[]),
];
const MYSQL_PARAMS: &[(&str, &[&str])] = &[
    ("ssl-mode", &["disabled", "preferred", "required"]),
    ("charset", &[]),
];

fn no_controls(what: &str, s: &str) -> Result<()> {
    if s.chars().any(|c| c.is_control()) {
        return Err(DataError::Invalid(format!(
            "the {what} of a data source URL may not contain control characters"
        )));
    }
    Ok(())
}

impl SourceUrl {
    /// Parse and check the form of a URL (nothing is resolved or opened yet).
    pub fn parse(raw: &str) -> Result<SourceUrl> {
        let raw = raw.trim();
        if raw.len() > 2048 {
            return Err(DataError::Invalid(
                "a data source URL is at most 2048 characters".into(),
            ));
        }
        if let Some(rest) = raw.strip_prefix("sqlite:") {
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            if rest.contains('?') || rest.contains('#') {
                return Err(DataError::Invalid(
                    "a SQLite data source is `sqlite:<path>` without options: it is always opened read-only".into(),
                ));
            }
            no_controls("path", rest)?;
            if rest.is_empty() {
                return Err(DataError::Invalid("`sqlite:` needs a file path".into()));
            }
            let path = PathBuf::from(rest);
            if path.components().any(|c| matches!(c, Component::ParentDir)) {
                return Err(DataError::Refused(
                    "a SQLite path may not contain `..`: name a file inside the tenant's area"
                        .into(),
                ));
            }
            return Ok(SourceUrl::Sqlite { path });
        }
        let url = Url::parse(raw).map_err(|e| {
            DataError::Invalid(format!(
                "not a data source URL ({e}); use postgres://user:password@host:port/database, \
                 mysql://…, mariadb://… or sqlite:<path>"
            ))
        })?;
        let engine = match url.scheme() {
            "postgres" | "postgresql" => Engine::Postgres,
            "mysql" | "mariadb" => Engine::Mysql,
            other => {
                return Err(DataError::Invalid(format!(
                    "unsupported data source scheme {other:?}: use postgres, mysql, mariadb or sqlite"
                )));
            }
        };
        if url.host_str().is_none_or(str::is_empty) {
            return Err(DataError::Invalid("the data source URL has no host".into()));
        }
        let database = url.path().trim_start_matches('/');
        if database.is_empty() || database.contains('/') {
            return Err(DataError::Invalid(
                "the data source URL must name one database: …/database".into(),
            ));
        }
        let decode = |s: &str| {
            percent_decode(s)
                .ok_or_else(|| DataError::Invalid("bad percent-encoding in the URL".into()))
        };
        no_controls("user", &decode(url.username())?)?;
        no_controls("password", &decode(url.password().unwrap_or_default())?)?;
        no_controls("database name", &decode(database)?)?;
        let allowed = match engine {
            Engine::Postgres => PG_PARAMS,
            _ => MYSQL_PARAMS,
        };
        for (k, v) in url.query_pairs() {
            let Some((_, values)) = allowed.iter().find(|(name, _)| *name == k) else {
                let names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
                return Err(DataError::Refused(format!(
                    "the URL option {k:?} is not accepted (it could point the driver at local files \
                     or sockets); accepted: {}",
                    names.join(", ")
                )));
            };
            no_controls("option", &v)?;
            if !values.is_empty() && !values.contains(&v.as_ref()) {
                return Err(DataError::Invalid(format!(
                    "{k}={v} is not accepted; use one of {}",
                    values.join(", ")
                )));
            }
        }
        if url.fragment().is_some() {
            return Err(DataError::Invalid(
                "a data source URL has no #fragment".into(),
            ));
        }
        Ok(SourceUrl::Server { engine, url })
    }

    pub fn engine(&self) -> Engine {
        match self {
            SourceUrl::Server { engine, .. } => *engine,
            SourceUrl::Sqlite { .. } => Engine::Sqlite,
        }
    }

    /// The URL with its password replaced by `***`: what may be shown.
    pub fn redacted(&self) -> String {
        match self {
            SourceUrl::Server { url, .. } => {
                let mut u = url.clone();
                if u.password().is_some() {
                    let _ = u.set_password(Some("***"));
                }
                u.to_string()
            }
            SourceUrl::Sqlite { path } => format!("sqlite:{}", path.display()),
        }
    }

    /// Where a connection for `tenant` may go, checked now: the server's addresses against the
    /// policy (a name is resolved, each answer checked, and the first kept for the connection),
    /// or the SQLite file opened beneath the tenant's area.
    pub async fn check(&self, policy: &NetPolicy, tenant: &str) -> Result<Target> {
        match self {
            SourceUrl::Server { engine, url } => {
                let port = url.port().unwrap_or(engine.default_port());
                let addrs: Vec<SocketAddr> = match url.host() {
                    Some(url::Host::Ipv4(ip)) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
                    Some(url::Host::Ipv6(ip)) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
                    Some(url::Host::Domain(name)) => {
                        let found = policy.resolver.lookup(name, port).await.map_err(|e| {
                            DataError::Unavailable(format!("cannot resolve {name}: {e}"))
                        })?;
                        if found.is_empty() {
                            return Err(DataError::Unavailable(format!(
                                "{name} resolves to no address"
                            )));
                        }
                        found
                    }
                    None => return Err(DataError::Invalid("the URL has no host".into())),
                };
                let host = url.host_str().unwrap_or_default();
                for addr in &addrs {
                    check_addr(policy, host, *addr)?;
                }
                Ok(Target::Server {
                    engine: *engine,
                    url: url.clone(),
                    addr: addrs[0],
                })
            }
            SourceUrl::Sqlite { path } => {
                let root = policy.workspaces.join(tenant);
                let file = open_beneath(&root, path)?;
                Ok(Target::Sqlite {
                    file: Arc::new(file),
                })
            }
        }
    }
}

/// Refuse an address the network rule forbids or that reaches the platform's own services.
fn check_addr(policy: &NetPolicy, host: &str, addr: SocketAddr) -> Result<()> {
    let ip = canonical(addr.ip());
    for own in &policy.platform_endpoints {
        let own_ip = canonical(own.ip());
        let same_host = ip == own_ip || (is_this_host(own_ip) && is_this_host(ip));
        if same_host && own.port() == addr.port() {
            return Err(DataError::Refused(format!(
                "{host}:{} is the platform's own service; a data source may not point at it",
                addr.port()
            )));
        }
    }
    if let Some(reason) = (policy.refusal)(ip) {
        return Err(DataError::Refused(format!(
            "{host} is {ip}, a {reason} address; data sources may not reach private networks \
             unless the platform allows them (AGENTRY_TOOLS__ALLOWED_NETWORKS)"
        )));
    }
    Ok(())
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Whether `ip` is this machine: loopback, unspecified, or assigned to one of its interfaces
/// (a socket can be bound to it). A server listening on all interfaces answers on each.
fn is_this_host(ip: IpAddr) -> bool {
    ip.is_loopback()
        || ip.is_unspecified()
        || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Open `path` (relative to `root`, or absolute inside it) without leaving `root`: each
/// component is opened beneath the previous one and a symlink that leads out is refused, so a
/// link swapped in meanwhile cannot redirect it either.
fn open_beneath(root: &Path, path: &Path) -> Result<std::fs::File> {
    let outside = || {
        DataError::Refused(
            "a SQLite data source must be a file inside the tenant's own area (its users' \
             workspaces); name it relative to it, e.g. sqlite:<user id>/sales.db"
                .to_string(),
        )
    };
    let relative: PathBuf = if path.is_absolute() {
        let canon_root = std::fs::canonicalize(root).map_err(|_| outside())?;
        match path
            .strip_prefix(&canon_root)
            .or_else(|_| path.strip_prefix(root))
        {
            Ok(rel) => rel.to_path_buf(),
            Err(_) => return Err(outside()),
        }
    } else {
        path.to_path_buf()
    };
    if relative.as_os_str().is_empty()
        || relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(outside());
    }
    let dir =
        cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority()).map_err(|e| {
            DataError::Invalid(format!(
                "the tenant's area has no such file ({}): {e}",
                relative.display()
            ))
        })?;
    let file = dir.open(&relative).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => DataError::Invalid(format!(
            "no SQLite file {} in the tenant's area",
            relative.display()
        )),
        std::io::ErrorKind::PermissionDenied => outside(),
        _ => outside(),
    })?;
    let meta = file.metadata().map_err(|_| outside())?;
    if !meta.is_file() {
        return Err(DataError::Invalid(format!(
            "{} is not a regular file",
            relative.display()
        )));
    }
    Ok(file.into_std())
}

/// A checked place to connect to: a server's address (with the URL's credentials and
/// options), or an open SQLite file.
#[derive(Debug, Clone)]
pub enum Target {
    Server {
        engine: Engine,
        url: Url,
        addr: SocketAddr,
    },
    Sqlite {
        file: Arc<std::fs::File>,
    },
}

impl Target {
    pub fn engine(&self) -> Engine {
        match self {
            Target::Server { engine, .. } => *engine,
            Target::Sqlite { .. } => Engine::Sqlite,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(workspaces: PathBuf, endpoints: Vec<SocketAddr>) -> NetPolicy {
        NetPolicy {
            refusal: Arc::new(|ip: IpAddr| {
                // The test rule: 127.0.0.0/8 allowed (the test databases), 10/8 refused.
                match ip {
                    IpAddr::V4(v4) if v4.octets()[0] == 10 => Some("private"),
                    _ => None,
                }
            }),
            platform_endpoints: endpoints,
            workspaces,
            resolver: Arc::new(SystemResolve),
        }
    }

    #[test]
    fn urls_are_parsed_and_their_dangerous_options_refused() {
        let ok =
            SourceUrl::parse("postgres://ro:s3cret@127.0.0.1:5432/sales?sslmode=disable").unwrap();
        assert_eq!(ok.engine(), Engine::Postgres);
        assert_eq!(
            ok.redacted(),
            "postgres://ro:***@127.0.0.1:5432/sales?sslmode=disable"
        );
        assert!(!format!("{ok:?}").contains("s3cret"));
        assert_eq!(
            SourceUrl::parse("mariadb://u@127.0.0.1/shop")
                .unwrap()
                .engine(),
            Engine::Mysql
        );
        for (bad, why) in [
            (
                "postgres://u@127.0.0.1/db?host=/var/run/postgresql",
                "not accepted",
            ),
            (
                "postgres://u@127.0.0.1/db?sslrootcert=/etc/shadow",
                "not accepted",
            ),
            (
                "postgres://u@127.0.0.1/db?sslmode=verify-full",
                "not accepted",
            ),
            (
                "mysql://u@127.0.0.1/db?socket=/tmp/mysql.sock",
                "not accepted",
            ),
            (
                "postgres://u%0D%0AFLUSHALL@127.0.0.1/db",
                "control characters",
            ),
            ("postgres://u@127.0.0.1/", "one database"),
            ("redis://127.0.0.1:6379/0", "unsupported"),
            ("sqlite:../other-tenant/x.db", "`..`"),
            ("sqlite:x.db?mode=rwc", "without options"),
        ] {
            let e = SourceUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn addresses_are_checked_against_the_rule_and_the_platforms_own_services() {
        let dir = tempfile::tempdir().unwrap();
        let pg: SocketAddr = "127.0.0.1:5432".parse().unwrap();
        let p = policy(dir.path().to_path_buf(), vec![pg]);
        let check = |u: &str| {
            let p = p.clone();
            let u = SourceUrl::parse(u).unwrap();
            async move { u.check(&p, "t").await }
        };
        // The platform's database, however it is written.
        for u in [
            "postgres://u@127.0.0.1:5432/other",
            "postgres://u@127.0.0.2:5432/other",
            "postgres://u@[::ffff:127.0.0.1]:5432/other",
            "postgres://u@0.0.0.0:5432/other",
            "postgres://u@[::1]:5432/other",
        ] {
            let e = check(u).await.unwrap_err().to_string();
            assert!(e.contains("platform's own service"), "{u}: {e}");
        }
        // Another port on this host is allowed by the test rule; 10/8 is not.
        assert!(check("mysql://u@127.0.0.1:3306/shop").await.is_ok());
        let e = check("postgres://u@10.1.2.3/db")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("private"), "{e}");
    }

    #[test]
    fn sqlite_files_must_be_inside_the_tenants_area() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("workspaces");
        std::fs::create_dir_all(ws.join("t/u")).unwrap();
        std::fs::create_dir_all(ws.join("other/u")).unwrap();
        std::fs::write(ws.join("t/u/ok.db"), b"x").unwrap();
        std::fs::write(ws.join("other/u/secret.db"), b"x").unwrap();
        std::fs::write(dir.path().join("agentry.db"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("agentry.db"), ws.join("t/u/link.db")).unwrap();
        std::os::unix::fs::symlink(ws.join("other"), ws.join("t/u/dir")).unwrap();
        let root = ws.join("t");
        assert!(open_beneath(&root, Path::new("u/ok.db")).is_ok());
        assert!(open_beneath(&root, &ws.join("t/u/ok.db")).is_ok());
        for bad in [
            PathBuf::from("u/link.db"),
            PathBuf::from("u/dir/u/secret.db"),
            ws.join("other/u/secret.db"),
            dir.path().join("agentry.db"),
            PathBuf::from("/etc/passwd"),
        ] {
            let e = open_beneath(&root, &bad).unwrap_err().to_string();
            assert!(
                e.contains("inside the tenant's own area"),
                "{}: {e}",
                bad.display()
            );
        }
        assert!(open_beneath(&root, Path::new("u")).is_err(), "a directory");
    }
}
