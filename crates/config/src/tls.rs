//! Transport security (cluster file `[tls]`, optional): which certificates the nodes and
//! clients present, and whether plain TCP is allowed off loopback.
//!
//! ```toml
//! [tls]
//! ca = "certs/ca.pem"                  # the cluster's CA: the only issuer trusted
//! node_cert = "certs/node-{id}.pem"    # each node's certificate chain ({id}: its id)
//! node_key = "certs/node-{id}.key"     # and its private key (PKCS#8, PEM)
//! client_cert = "certs/client.pem"     # what clients (bench, kv, status, gateway) present
//! client_key = "certs/client.key"
//!
//! # A node's files may be given one by one instead of (or over) the patterns:
//! # [[tls.node]]
//! # id = 3
//! # cert = "/etc/partita/node-3.pem"
//! # key = "/etc/partita/node-3.key"
//!
//! # or, instead of all of the above, plain TCP everywhere, loopback or not:
//! # insecure = true
//! ```
//!
//! `partita certs` writes these files and the section. Relative paths are relative to
//! the cluster file's directory ([`crate::ClusterConfig::load`] makes them absolute,
//! so a copy of the file elsewhere still names the same files).
//!
//! Without a `[tls]` section connections are plain TCP, and a node refuses to listen
//! on an address outside 127.0.0.0/8 ([`check_plain_bind`]): plain TCP across hosts
//! needs `insecure = true`, said on purpose. The certificate names that identify a
//! node (`node-<id>.partita`) and a client (`client.partita`) are defined here, once,
//! for the generator (`partita certs`) and the verifier (`partita-net`).
//!
//! This module checks the section's fields when the file is parsed; whether the files
//! exist is checked by the role that reads them ([`TlsSection::node_files`],
//! [`TlsSection::client_files`]), since a client machine holds no node key and a node
//! need not hold the client key. Every error names its field.

use partita_types::{FieldError, NodeId};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The DNS name (subject alternative name) that identifies node `id` of a cluster.
pub fn node_name(id: NodeId) -> String {
    format!("node-{id}.partita")
}

/// The DNS name that identifies a client certificate. A client certificate also has
/// only the `clientAuth` extended key usage, so it cannot serve as a node's.
pub const CLIENT_NAME: &str = "client.partita";

/// The placeholder of a node's id in `node_cert` and `node_key`.
pub const ID_PLACEHOLDER: &str = "{id}";

/// The `[tls]` section as written in the file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// Plain TCP everywhere, also off loopback. Excludes every other field.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// The cluster CA's certificate (PEM): the only trust anchor, for nodes and clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// Every node's certificate chain (PEM, leaf first), `{id}` standing for its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_cert: Option<PathBuf>,
    /// Every node's private key (PEM), `{id}` standing for its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_key: Option<PathBuf>,
    /// The client certificate chain (PEM) that clients present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<PathBuf>,
    /// The client's private key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
    /// Per-node files, over the patterns.
    #[serde(default, rename = "node", skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<TlsNode>,
}

/// One node's certificate and key, given by name (`[[tls.node]]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsNode {
    pub id: NodeId,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What connections of a cluster are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// No `[tls]` section: plain TCP, on loopback only.
    Plain,
    /// `insecure = true`: plain TCP on any address.
    Insecure,
    /// Mutual TLS between nodes and from clients.
    Tls,
}

/// The files one party presents, checked to exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsSection {
    /// The section `partita certs` writes for the files it made in `dir`.
    pub fn generated(dir: &Path) -> TlsSection {
        TlsSection {
            insecure: false,
            ca: Some(dir.join("ca.pem")),
            node_cert: Some(dir.join("node-{id}.pem")),
            node_key: Some(dir.join("node-{id}.key")),
            client_cert: Some(dir.join("client.pem")),
            client_key: Some(dir.join("client.key")),
            nodes: Vec::new(),
        }
    }

    pub fn transport(section: Option<&TlsSection>) -> Transport {
        match section {
            None => Transport::Plain,
            Some(s) if s.insecure => Transport::Insecure,
            Some(_) => Transport::Tls,
        }
    }

    /// The section's fields, for a cluster of `nodes`: `insecure` alone or a CA and a
    /// certificate and key for every node; patterns with `{id}`; cert and key in pairs.
    pub fn validate(&self, nodes: &[NodeId]) -> Result<(), FieldError> {
        let f = |field: &str, m: String| Err(FieldError::new(format!("tls.{field}"), m));
        let named: Vec<(&str, &Option<PathBuf>)> = vec![
            ("ca", &self.ca),
            ("node_cert", &self.node_cert),
            ("node_key", &self.node_key),
            ("client_cert", &self.client_cert),
            ("client_key", &self.client_key),
        ];
        if self.insecure {
            let given: Vec<&str> = named
                .iter()
                .filter(|(_, v)| v.is_some())
                .map(|(k, _)| *k)
                .chain((!self.nodes.is_empty()).then_some("node"))
                .collect();
            if !given.is_empty() {
                return f(
                    "insecure",
                    format!(
                        "insecure = true turns TLS off, yet the section also names {}: \
                         remove them, or remove insecure to use TLS",
                        given.join(", ")
                    ),
                );
            }
            return Ok(());
        }
        for (field, v) in &named {
            if v.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return f(field, "is empty: give a path to a PEM file".into());
            }
        }
        if self.ca.is_none() {
            return f(
                "ca",
                "is required with TLS: the cluster CA's certificate (PEM), as `partita certs` \
                 writes it; or say insecure = true for plain TCP"
                    .into(),
            );
        }
        match (&self.node_cert, &self.node_key) {
            (Some(_), None) => return f("node_key", "node_cert is given without node_key".into()),
            (None, Some(_)) => return f("node_cert", "node_key is given without node_cert".into()),
            _ => {}
        }
        for (field, v) in [("node_cert", &self.node_cert), ("node_key", &self.node_key)] {
            if let Some(p) = v {
                if !p.to_string_lossy().contains(ID_PLACEHOLDER) {
                    return f(
                        field,
                        format!(
                            "`{}` has no {ID_PLACEHOLDER}: every node needs a certificate \
                             of its own (its name identifies it), so the pattern must name \
                             each node's file, or give [[tls.node]] entries",
                            p.display()
                        ),
                    );
                }
            }
        }
        match (&self.client_cert, &self.client_key) {
            (Some(_), None) => {
                return f(
                    "client_key",
                    "client_cert is given without client_key".into(),
                )
            }
            (None, Some(_)) => {
                return f(
                    "client_cert",
                    "client_key is given without client_cert".into(),
                )
            }
            _ => {}
        }
        let mut seen = Vec::new();
        for n in &self.nodes {
            if !nodes.contains(&n.id) {
                return f(
                    "node.id",
                    format!("{} is not a node of this cluster file", n.id),
                );
            }
            if seen.contains(&n.id) {
                return f("node.id", format!("node {} is given twice", n.id));
            }
            seen.push(n.id);
            for (field, p) in [("node.cert", &n.cert), ("node.key", &n.key)] {
                if p.as_os_str().is_empty() {
                    return f(field, format!("node {}: empty path", n.id));
                }
            }
        }
        if self.node_cert.is_none() {
            if let Some(id) = nodes.iter().find(|id| !seen.contains(id)) {
                return f(
                    "node",
                    format!(
                        "node {id} has no certificate: give node_cert and node_key patterns \
                         or a [[tls.node]] entry for every node"
                    ),
                );
            }
        }
        Ok(())
    }

    /// Make every relative path relative to `dir` (the cluster file's directory).
    pub fn resolve_paths(&mut self, dir: &Path) {
        let abs = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        for p in [
            &mut self.ca,
            &mut self.node_cert,
            &mut self.node_key,
            &mut self.client_cert,
            &mut self.client_key,
        ]
        .into_iter()
        .flatten()
        {
            abs(p);
        }
        for n in &mut self.nodes {
            abs(&mut n.cert);
            abs(&mut n.key);
        }
    }

    /// Node `id`'s CA, certificate and key, each checked to be a readable file.
    pub fn node_files(&self, id: NodeId) -> Result<TlsFiles, FieldError> {
        assert!(!self.insecure, "node_files of an insecure section");
        let (cert, key, cert_field, key_field) = match self.nodes.iter().find(|n| n.id == id) {
            Some(n) => (
                n.cert.clone(),
                n.key.clone(),
                "tls.node.cert",
                "tls.node.key",
            ),
            None => {
                let (Some(c), Some(k)) = (&self.node_cert, &self.node_key) else {
                    return Err(FieldError::new(
                        "tls.node",
                        format!("node {id} has no certificate in [tls]"),
                    ));
                };
                let put = |p: &Path| {
                    PathBuf::from(p.to_string_lossy().replace(ID_PLACEHOLDER, &id.to_string()))
                };
                (put(c), put(k), "tls.node_cert", "tls.node_key")
            }
        };
        Ok(TlsFiles {
            ca: self.ca_file()?,
            cert: readable(cert_field, cert, &format!("node {id}'s certificate"))?,
            key: readable(key_field, key, &format!("node {id}'s private key"))?,
        })
    }

    /// The client's CA, certificate and key, each checked to be a readable file.
    pub fn client_files(&self) -> Result<TlsFiles, FieldError> {
        assert!(!self.insecure, "client_files of an insecure section");
        let (Some(cert), Some(key)) = (&self.client_cert, &self.client_key) else {
            return Err(FieldError::new(
                "tls.client_cert",
                "the cluster uses TLS and a client must present a certificate, but [tls] \
                 names no client_cert and client_key (`partita certs` writes them)",
            ));
        };
        Ok(TlsFiles {
            ca: self.ca_file()?,
            cert: readable("tls.client_cert", cert.clone(), "the client certificate")?,
            key: readable("tls.client_key", key.clone(), "the client's private key")?,
        })
    }

    fn ca_file(&self) -> Result<PathBuf, FieldError> {
        let ca = self.ca.clone().expect("validated: ca with TLS");
        readable("tls.ca", ca, "the cluster CA's certificate")
    }
}

impl crate::ClusterConfig {
    /// What this cluster's connections are (see [`Transport`]).
    pub fn transport(&self) -> Transport {
        TlsSection::transport(self.tls.as_ref())
    }
}

/// `path` if it is a file that can be opened; else an error naming `field`.
fn readable(field: &str, path: PathBuf, what: &str) -> Result<PathBuf, FieldError> {
    match std::fs::File::open(&path) {
        Ok(f) if f.metadata().map(|m| m.is_file()).unwrap_or(false) => Ok(path),
        Ok(_) => Err(FieldError::new(
            field,
            format!("{what}: {} is not a file", path.display()),
        )),
        Err(e) => Err(FieldError::new(
            field,
            format!("{what}: cannot read {}: {e}", path.display()),
        )),
    }
}

/// Whether a node may listen on `addr` with this transport: plain TCP (no `[tls]`)
/// only on 127.0.0.0/8 (or ::1). Anything else is refused with the reason, so that
/// traffic that leaves the host is never plain by accident.
pub fn check_plain_bind(addr: SocketAddr, transport: Transport) -> Result<(), String> {
    match transport {
        Transport::Tls | Transport::Insecure => Ok(()),
        Transport::Plain if addr.ip().is_loopback() => Ok(()),
        Transport::Plain => Err(format!(
            "refusing to listen on {addr} with plain TCP: it is outside 127.0.0.0/8, so \
             traffic would leave this host unauthenticated and unencrypted. Add a [tls] \
             section to the cluster file (`partita certs --out DIR --cluster FILE` writes \
             the certificates and the section), or say `insecure = true` under [tls] to \
             allow plain TCP on purpose"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section() -> TlsSection {
        TlsSection::generated(Path::new("/certs"))
    }

    fn err(s: &TlsSection, nodes: &[NodeId]) -> (String, String) {
        let e = s.validate(nodes).unwrap_err();
        (e.field, e.message)
    }

    #[test]
    fn the_generated_section_is_valid_and_names_each_node_file() {
        let s = section();
        s.validate(&[1, 2, 3]).unwrap();
        assert_eq!(TlsSection::transport(Some(&s)), Transport::Tls);
        assert_eq!(TlsSection::transport(None), Transport::Plain);
        let insecure = TlsSection {
            insecure: true,
            ..TlsSection::default()
        };
        insecure.validate(&[1]).unwrap();
        assert_eq!(TlsSection::transport(Some(&insecure)), Transport::Insecure);
        assert_eq!(node_name(7), "node-7.partita");
    }

    #[test]
    fn field_errors_name_their_field() {
        let nodes = [1, 2, 3];
        let cases: Vec<(TlsSection, &str, &str)> = vec![
            (
                TlsSection {
                    insecure: true,
                    ..section()
                },
                "tls.insecure",
                "turns TLS off",
            ),
            (
                TlsSection {
                    ca: None,
                    ..section()
                },
                "tls.ca",
                "required",
            ),
            (
                TlsSection {
                    ca: Some(PathBuf::new()),
                    ..section()
                },
                "tls.ca",
                "empty",
            ),
            (
                TlsSection {
                    node_key: None,
                    ..section()
                },
                "tls.node_key",
                "without node_key",
            ),
            (
                TlsSection {
                    node_cert: None,
                    ..section()
                },
                "tls.node_cert",
                "without node_cert",
            ),
            (
                TlsSection {
                    node_cert: Some("/certs/node.pem".into()),
                    ..section()
                },
                "tls.node_cert",
                "{id}",
            ),
            (
                TlsSection {
                    client_key: None,
                    ..section()
                },
                "tls.client_key",
                "without client_key",
            ),
            (
                TlsSection {
                    nodes: vec![TlsNode {
                        id: 9,
                        cert: "a".into(),
                        key: "b".into(),
                    }],
                    ..section()
                },
                "tls.node.id",
                "not a node",
            ),
            (
                TlsSection {
                    nodes: vec![
                        TlsNode {
                            id: 1,
                            cert: "a".into(),
                            key: "b".into(),
                        };
                        2
                    ],
                    ..section()
                },
                "tls.node.id",
                "twice",
            ),
            (
                TlsSection {
                    node_cert: None,
                    node_key: None,
                    nodes: vec![TlsNode {
                        id: 1,
                        cert: "a".into(),
                        key: "b".into(),
                    }],
                    ..section()
                },
                "tls.node",
                "node 2 has no certificate",
            ),
        ];
        for (s, field, text) in cases {
            let (got_field, message) = err(&s, &nodes);
            assert_eq!(got_field, field, "{message}");
            assert!(message.contains(text), "{field}: {message}");
        }
    }

    #[test]
    fn files_are_found_by_pattern_or_per_node_and_missing_ones_are_named() {
        let dir = std::env::temp_dir().join(format!("partita-tls-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "ca.pem",
            "node-1.pem",
            "node-1.key",
            "client.pem",
            "client.key",
            "n2.pem",
            "n2.key",
        ] {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        let mut s = TlsSection::generated(Path::new(""));
        s.nodes.push(TlsNode {
            id: 2,
            cert: "n2.pem".into(),
            key: "n2.key".into(),
        });
        s.validate(&[1, 2, 3]).unwrap();
        s.resolve_paths(&dir);
        let one = s.node_files(1).unwrap();
        assert_eq!(one.cert, dir.join("node-1.pem"));
        assert_eq!(one.key, dir.join("node-1.key"));
        assert_eq!(one.ca, dir.join("ca.pem"));
        assert_eq!(s.node_files(2).unwrap().cert, dir.join("n2.pem"));
        let e = s.node_files(3).unwrap_err();
        assert_eq!(e.field, "tls.node_cert");
        assert!(e.message.contains("node-3.pem"), "{}", e.message);
        assert_eq!(s.client_files().unwrap().cert, dir.join("client.pem"));
        std::fs::remove_file(dir.join("client.key")).unwrap();
        assert_eq!(s.client_files().unwrap_err().field, "tls.client_key");
        std::fs::remove_file(dir.join("ca.pem")).unwrap();
        let e = s.node_files(1).unwrap_err();
        assert_eq!(e.field, "tls.ca");
        assert!(e.message.contains("cannot read"), "{}", e.message);
        let no_client = TlsSection {
            client_cert: None,
            client_key: None,
            ..s.clone()
        };
        assert_eq!(
            no_client.client_files().unwrap_err().field,
            "tls.client_cert"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The section inside a whole cluster file: written and read back, unknown fields
    /// refused, errors reported against the file with their field, relative paths
    /// made relative to the file by `load`.
    #[test]
    fn a_cluster_file_carries_the_section() {
        let mut c = crate::ClusterConfig::default_local(7100, 5);
        assert_eq!(c.transport(), Transport::Plain);
        c.tls = Some(TlsSection::generated(Path::new("certs")));
        let text = c.to_toml();
        assert!(text.contains("[tls]\nca = \"certs/ca.pem\""), "{text}");
        let back = crate::ClusterConfig::parse(&text, "f.toml").unwrap();
        assert_eq!(back, c);
        assert_eq!(back.transport(), Transport::Tls);
        match crate::ClusterConfig::parse(&text.replace("[tls]", "[tls]\ncafile = \"x\""), "f.toml")
        {
            Err(crate::ConfigError::Parse { message, .. }) => {
                assert!(message.contains("cafile"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        match crate::ClusterConfig::parse(
            &text.replace("[tls]", "[tls]\ninsecure = true"),
            "f.toml",
        ) {
            Err(crate::ConfigError::Field { field, message, .. }) => {
                assert_eq!(field, "tls.insecure", "{message}")
            }
            other => panic!("{other:?}"),
        }
        let dir = std::env::temp_dir().join(format!("partita-tls-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cluster.toml"), &text).unwrap();
        let loaded = crate::ClusterConfig::load(&dir.join("cluster.toml")).unwrap();
        let t = loaded.tls.unwrap();
        assert_eq!(t.ca.unwrap(), dir.join("certs/ca.pem"));
        assert_eq!(t.node_key.unwrap(), dir.join("certs/node-{id}.key"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plain_tcp_is_refused_off_loopback_unless_insecure() {
        let lo: SocketAddr = "127.0.0.9:7000".parse().unwrap();
        let lo6: SocketAddr = "[::1]:7000".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7000".parse().unwrap();
        let lan: SocketAddr = "10.0.0.2:7000".parse().unwrap();
        assert!(check_plain_bind(lo, Transport::Plain).is_ok());
        assert!(check_plain_bind(lo6, Transport::Plain).is_ok());
        for a in [any, lan] {
            let e = check_plain_bind(a, Transport::Plain).unwrap_err();
            assert!(
                e.contains("outside 127.0.0.0/8") && e.contains("insecure = true"),
                "{e}"
            );
            assert!(check_plain_bind(a, Transport::Insecure).is_ok());
            assert!(check_plain_bind(a, Transport::Tls).is_ok());
        }
    }
}
