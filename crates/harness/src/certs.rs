//! `partita certs`: a cluster CA and the certificates it signs (rcgen, ECDSA P-256).
//!
//! For every node, a certificate whose subject alternative names are the node's name,
//! `node-<id>.partita` ([`partita_config::tls::node_name`]: what peers and clients
//! verify), and the IP address of its `addr` (for operators' tools; Partita checks the
//! name), with the `serverAuth` and `clientAuth` key usages, since a node both accepts
//! connections and opens them to its peers. One client certificate, `client.partita`,
//! with `clientAuth` only: a node refuses it on a peer connection, and a client cannot
//! pose as a server. Files (keys mode 0600):
//!
//! ```text
//! DIR/ca.pem  DIR/ca.key                 the cluster CA (keep ca.key off the nodes)
//! DIR/node-<id>.pem  DIR/node-<id>.key   each node's certificate (signed by the CA
//!                                        itself) and key
//! DIR/client.pem  DIR/client.key         what clients present
//! ```
//!
//! A directory that already holds `ca.pem` and `ca.key` keeps its CA (new nodes can be
//! added); a certificate file that exists is never overwritten unless asked
//! (`--force`). The same code makes the test suite's bad credentials
//! (`tests/tls.rs`): other CAs, expired or not yet valid certificates, wrong names.

use anyhow::{bail, Context};
use partita_config::tls::{node_name, TlsSection, CLIENT_NAME};
use partita_config::ClusterConfig;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The common name of every cluster CA `partita certs` makes.
pub const CA_COMMON_NAME: &str = "Partita cluster CA";

/// Default validity of what `partita certs` writes, in days.
pub const VALIDITY_DAYS_DEFAULT: u64 = 3650;

/// What a leaf certificate may be used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// A node: server and client authentication.
    Node,
    /// A client: client authentication only.
    Client,
    /// Server authentication only (a test's certificate a node must refuse as a peer).
    ServerOnly,
}

/// One certificate to issue.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub common_name: String,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    pub usage: Usage,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Leaf {
    /// Valid from an hour ago (clocks differ) for `days`.
    pub fn new(common_name: &str, dns_names: Vec<String>, usage: Usage, days: u64) -> Leaf {
        let now = SystemTime::now();
        Leaf {
            common_name: common_name.to_string(),
            dns_names,
            ips: Vec::new(),
            usage,
            not_before: now - Duration::from_secs(3600),
            not_after: now + Duration::from_secs(days * 86_400),
        }
    }

    /// Node `id`'s certificate: its name, and its IP when it has a specific one.
    pub fn node(id: u32, ip: Option<IpAddr>, days: u64) -> Leaf {
        let mut l = Leaf::new(
            &format!("partita node {id}"),
            vec![node_name(id)],
            Usage::Node,
            days,
        );
        l.ips.extend(ip.filter(|ip| !ip.is_unspecified()));
        l
    }

    /// The certificate of a node whose cluster file names it by `host` (an IP
    /// address or a DNS name, which the certificate carries as well).
    pub fn node_at(id: u32, host: &str, days: u64) -> Leaf {
        match host.parse::<IpAddr>() {
            Ok(ip) => Leaf::node(id, Some(ip), days),
            Err(_) => {
                let mut l = Leaf::node(id, None, days);
                l.dns_names.push(host.to_string());
                l
            }
        }
    }

    /// The client certificate.
    pub fn client(days: u64) -> Leaf {
        Leaf::new(
            "partita client",
            vec![CLIENT_NAME.to_string()],
            Usage::Client,
            days,
        )
    }

    fn params(&self) -> anyhow::Result<CertificateParams> {
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, self.common_name.as_str());
        p.distinguished_name = dn;
        for n in &self.dns_names {
            p.subject_alt_names.push(SanType::DnsName(
                n.clone().try_into().context("a DNS name")?,
            ));
        }
        p.subject_alt_names
            .extend(self.ips.iter().map(|ip| SanType::IpAddress(*ip)));
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = match self.usage {
            Usage::Node => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Usage::ServerOnly => vec![ExtendedKeyUsagePurpose::ServerAuth],
        };
        p.not_before = self.not_before.into();
        p.not_after = self.not_after.into();
        p.use_authority_key_identifier_extension = true;
        Ok(p)
    }

    /// The certificate signed by its own key (no CA at all), and that key.
    pub fn self_signed(&self) -> anyhow::Result<(String, String)> {
        let key = KeyPair::generate()?;
        let cert = self.params()?.self_signed(&key)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// A certificate authority: its certificate and the key it signs with.
pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    cert_pem: String,
}

/// The CA's parameters: the same every time, so that a CA read back from its files
/// (certificate and key) signs exactly as the one that wrote them.
fn ca_params(common_name: &str, days: u64) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "Partita");
    p.distinguished_name = dn;
    // Intermediates are allowed (an operator may sign nodes by one; the node's file
    // then holds its leaf, then the intermediate).
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = SystemTime::now();
    p.not_before = (now - Duration::from_secs(3600)).into();
    p.not_after = (now + Duration::from_secs(days * 86_400)).into();
    p
}

impl Ca {
    /// A new CA named `common_name` (tests make others with the same name: a
    /// certificate of another CA must be refused even when the names agree).
    pub fn generate(common_name: &str, days: u64) -> anyhow::Result<Ca> {
        let params = ca_params(common_name, days);
        let key = KeyPair::generate()?;
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(Ca {
            params,
            key,
            cert_pem,
        })
    }

    /// An intermediate CA signed by this one. What it signs is trusted only when the
    /// presented chain includes it (tests check a truncated chain is refused).
    pub fn intermediate(&self, common_name: &str, days: u64) -> anyhow::Result<Ca> {
        let params = ca_params(common_name, days);
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert_pem = params.signed_by(&key, &issuer)?.pem();
        Ok(Ca {
            params,
            key,
            cert_pem,
        })
    }

    /// The CA in `dir` (`ca.pem`, `ca.key`) as `partita certs` wrote it.
    pub fn load(dir: &Path) -> anyhow::Result<Ca> {
        let cert_pem = read(&dir.join("ca.pem"))?;
        let key = KeyPair::from_pem(&read(&dir.join("ca.key"))?)
            .with_context(|| format!("{}: not a PEM private key", dir.join("ca.key").display()))?;
        Ok(Ca {
            params: ca_params(CA_COMMON_NAME, VALIDITY_DAYS_DEFAULT),
            key,
            cert_pem,
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Issue `leaf` with a new key: (certificate PEM, key PEM).
    pub fn issue(&self, leaf: &Leaf) -> anyhow::Result<(String, String)> {
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = leaf.params()?.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Write `text` to `path`; private keys readable by their owner only.
pub fn write_file(path: &Path, text: &str, private: bool, force: bool) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if path.exists() && !force {
        bail!(
            "{} exists; not overwriting it (--force replaces certificates and keys)",
            path.display()
        );
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// What `partita certs` did.
pub struct Written {
    pub dir: PathBuf,
    pub ca_reused: bool,
    pub nodes: Vec<u32>,
    /// The `[tls]` section naming the files.
    pub section: TlsSection,
}

/// Write a CA (or keep the one in `dir`), a certificate and key for each of `nodes`
/// (id, the host of its address: an IP, a DNS name or none), and the client's.
pub fn write_certs(
    dir: &Path,
    nodes: &[(u32, Option<String>)],
    days: u64,
    force: bool,
) -> anyhow::Result<Written> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = std::path::absolute(dir)?;
    let ca_reused = dir.join("ca.pem").exists() && dir.join("ca.key").exists();
    let ca = if ca_reused {
        Ca::load(&dir)?
    } else {
        let ca = Ca::generate(CA_COMMON_NAME, days)?;
        write_file(&dir.join("ca.pem"), ca.cert_pem(), false, force)?;
        write_file(&dir.join("ca.key"), &ca.key_pem(), true, force)?;
        ca
    };
    for (id, host) in nodes {
        let id = *id;
        let leaf = match host {
            Some(h) => Leaf::node_at(id, h, days),
            None => Leaf::node(id, None, days),
        };
        let (cert, key) = ca.issue(&leaf)?;
        write_file(&dir.join(format!("node-{id}.pem")), &cert, false, force)?;
        write_file(&dir.join(format!("node-{id}.key")), &key, true, force)?;
    }
    let (cert, key) = ca.issue(&Leaf::client(days))?;
    write_file(&dir.join("client.pem"), &cert, false, force)?;
    write_file(&dir.join("client.key"), &key, true, force)?;
    Ok(Written {
        section: TlsSection::generated(&dir),
        dir,
        ca_reused,
        nodes: nodes.iter().map(|(id, _)| *id).collect(),
    })
}

/// The `[tls]` section as TOML text (paths quoted as TOML basic strings).
pub fn section_toml(s: &TlsSection) -> String {
    let q = |p: &Option<PathBuf>| {
        serde_json::to_string(&p.as_ref().expect("generated").to_string_lossy())
            .expect("a string serializes")
    };
    format!(
        "[tls]\nca = {}\nnode_cert = {}\nnode_key = {}\nclient_cert = {}\nclient_key = {}\n",
        q(&s.ca),
        q(&s.node_cert),
        q(&s.node_key),
        q(&s.client_cert),
        q(&s.client_key)
    )
}

/// `partita certs --cluster FILE`: certificates for the file's nodes, and its `[tls]`
/// section appended when it has none (the rest of the file is left as written).
/// Returns what was written and whether the file was changed.
pub fn certs_for_cluster_file(
    dir: &Path,
    file: &Path,
    days: u64,
    force: bool,
) -> anyhow::Result<(Written, bool)> {
    let (cluster, has_section) = match ClusterConfig::load(file) {
        Ok(c) => {
            let has = c.tls.is_some();
            (c, has)
        }
        // Addresses off loopback without a [tls] section are refused, and adding the
        // section is what this is for: read the nodes as if it were there. (A file
        // that has one cannot take a second: the original error stands.)
        Err(e) => {
            let text = format!("{}\n[tls]\ninsecure = true\n", read(file)?);
            let c = ClusterConfig::parse(&text, &file.display().to_string()).map_err(|_| e)?;
            (c, false)
        }
    };
    // The host as the file gives it: a name goes into the certificate as a name.
    let nodes: Vec<(u32, Option<String>)> = cluster
        .nodes
        .iter()
        .map(|n| {
            let host = match n.addr.parse::<std::net::SocketAddr>() {
                Ok(a) => a.ip().to_string(),
                // Validated when the file was read: a name.
                Err(_) => partita_config::name_and_port(&n.addr)
                    .map_or_else(|_| n.addr.clone(), |(h, _)| h.to_string()),
            };
            (n.id, Some(host))
        })
        .collect();
    let w = write_certs(dir, &nodes, days, force)?;
    if has_section {
        return Ok((w, false));
    }
    let mut text = read(file)?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("\n# Mutual TLS between nodes and from clients (written by `partita certs`).\n");
    text.push_str(&section_toml(&w.section));
    std::fs::write(file, &text).with_context(|| format!("writing {}", file.display()))?;
    // The file must still load, now with TLS.
    let back = ClusterConfig::load(file)?;
    assert!(
        back.tls.is_some(),
        "the appended [tls] section is read back"
    );
    Ok((w, true))
}
