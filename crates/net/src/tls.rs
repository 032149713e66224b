//! Mutual TLS (rustls, TLS 1.3 only, ring) for node↔node and client↔node connections.
//!
//! One CA per cluster is the only trust anchor. A node's certificate names it
//! (`node-<id>.partita`, [`partita_config::tls::node_name`]) and carries both the
//! `serverAuth` and `clientAuth` key usages, since a node accepts connections and opens
//! them to its peers; a client certificate names `client.partita` and carries only
//! `clientAuth`. Who verifies what:
//!
//! - a node opening a link to peer `p`, and a client opening a connection to node `p`,
//!   verify the server's chain to the CA, its validity period, `serverAuth`, and that
//!   it names `node-<p>.partita` (rustls's WebPKI server verifier);
//! - a node accepting a connection requires a client certificate and verifies its chain
//!   to the CA, its validity and `clientAuth` (rustls's WebPKI client verifier); then,
//!   once the first frame says who the connection claims to be, [`PeerIdentity`] must
//!   agree: a `PeerHello { from }` needs node `from`'s certificate, a `ClientHello` a
//!   client certificate (a node's certificate is refused there: nodes do not act as
//!   clients), a status probe either.
//!
//! Above the TLS stream the frames are unchanged. Failures are errors the caller logs
//! with the reason rustls gives (`UnknownIssuer`, `Expired`, ...) and the peer's
//! address.

use partita_config::tls::{node_name, TlsFiles, CLIENT_NAME};
use partita_types::NodeId;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpStream;

pub use rustls;
pub use tokio_rustls;

/// How long a TLS handshake may take before the connection is dropped (a peer that
/// opens a connection and says nothing must not hold a task for ever).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file named by the cluster file's `[tls]` cannot be used.
    #[error("{what} {path}: {why}")]
    File {
        what: &'static str,
        path: String,
        why: String,
    },
    /// rustls refused the credentials as a whole (e.g. a key that is not the
    /// certificate's).
    #[error("{0}")]
    Config(String),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_err(what: &'static str, path: &Path, why: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        what,
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// Every certificate in a PEM file, leaf first; at least one.
pub fn load_certs(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(what, path, e))?;
    if certs.is_empty() {
        return Err(file_err(what, path, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn load_key(path: &Path, what: &'static str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_err(what, path, e))
}

fn roots(ca: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for c in load_certs(ca, "the cluster CA's certificate")? {
        store
            .add(c)
            .map_err(|e| file_err("the cluster CA's certificate", ca, e))?;
    }
    Ok(Arc::new(store))
}

/// The configuration a client presents: the CA to verify nodes with, and its own chain
/// and key.
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = roots(&files.ca)?;
    let chain = load_certs(&files.cert, "certificate")?;
    let key = load_key(&files.key, "private key")?;
    let cfg = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| key_error(files, e))?;
    Ok(Arc::new(cfg))
}

fn key_error(files: &TlsFiles, e: rustls::Error) -> TlsError {
    TlsError::Config(format!(
        "certificate {} with key {}: {e} (is the key the certificate's?)",
        files.cert.display(),
        files.key.display()
    ))
}

/// A node's two sides: the server configuration that requires a client certificate of
/// the cluster's CA, and the client configuration its peer links use.
#[derive(Clone)]
pub struct NodeTls {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
    /// Every node of the cluster: the cluster file's, then those added at run time
    /// ([`NodeTls::add_node`]). A certificate of the cluster's CA that names none of
    /// them is refused (and said whose it is not).
    nodes: Arc<RwLock<Vec<NodeId>>>,
}

impl NodeTls {
    pub fn load(files: &TlsFiles, nodes: Vec<NodeId>) -> Result<NodeTls, TlsError> {
        let roots = roots(&files.ca)?;
        let chain = load_certs(&files.cert, "certificate")?;
        let key = load_key(&files.key, "private key")?;
        let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| TlsError::Config(format!("client verifier: {e}")))?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| key_error(files, e))?;
        Ok(NodeTls {
            server: Arc::new(server),
            client: client_config(files)?,
            nodes: Arc::new(RwLock::new(nodes)),
        })
    }

    /// Node `id` joined the cluster at run time (a membership change names it): its
    /// certificate identifies it from now on, on every connection accepted after.
    pub fn add_node(&self, id: NodeId) {
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        if !nodes.contains(&id) {
            nodes.push(id);
        }
    }

    /// The identity the peer of a server stream proved, among this cluster's nodes.
    pub fn peer_identity(&self, stream: &ServerStream) -> PeerIdentity {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        peer_identity(stream, &nodes)
    }
}

/// Who a verified certificate names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerIdentity {
    Node(NodeId),
    Client,
    /// Signed by the CA, but naming no node of this cluster and no client.
    Unnamed,
}

impl std::fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerIdentity::Node(n) => write!(f, "node {n}'s certificate ({})", node_name(*n)),
            PeerIdentity::Client => write!(f, "a client certificate ({CLIENT_NAME})"),
            PeerIdentity::Unnamed => {
                write!(
                    f,
                    "a certificate that names no node of this cluster and no client"
                )
            }
        }
    }
}

/// Whom `leaf` (already verified to the CA by rustls) names, among `nodes`.
pub fn identify(leaf: &CertificateDer<'_>, nodes: &[NodeId]) -> PeerIdentity {
    let Ok(parsed) = ParsedCertificate::try_from(leaf) else {
        return PeerIdentity::Unnamed;
    };
    let names = |name: String| {
        ServerName::try_from(name)
            .is_ok_and(|n| rustls::client::verify_server_name(&parsed, &n).is_ok())
    };
    if names(CLIENT_NAME.to_string()) {
        return PeerIdentity::Client;
    }
    nodes
        .iter()
        .find(|&&n| names(node_name(n)))
        .map_or(PeerIdentity::Unnamed, |&n| PeerIdentity::Node(n))
}

/// The name a connection to node `id` verifies.
pub fn server_name(id: NodeId) -> ServerName<'static> {
    ServerName::try_from(node_name(id)).expect("node names are DNS names")
}

/// The server side of a node's connection after the handshake.
pub type ServerStream = tokio_rustls::server::TlsStream<TcpStream>;
/// The client side of a connection to a node.
pub type ClientStream = tokio_rustls::client::TlsStream<TcpStream>;

/// Accept a TLS connection (bounded by [`HANDSHAKE_TIMEOUT`]).
pub async fn accept(cfg: &Arc<ServerConfig>, tcp: TcpStream) -> std::io::Result<ServerStream> {
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg.clone());
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no TLS handshake within {HANDSHAKE_TIMEOUT:?}"),
        )),
    }
}

/// Open TLS on `tcp` to node `id` (bounded by [`HANDSHAKE_TIMEOUT`]).
pub async fn connect(
    cfg: &Arc<ClientConfig>,
    id: NodeId,
    tcp: TcpStream,
) -> std::io::Result<ClientStream> {
    let connector = tokio_rustls::TlsConnector::from(cfg.clone());
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(server_name(id), tcp)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no TLS handshake with node {id} within {HANDSHAKE_TIMEOUT:?}"),
        )),
    }
}

/// A short explanation, for the log, of why a handshake failed (what the rustls error
/// usually means in a cluster), or `""`.
pub fn explain(e: &std::io::Error) -> &'static str {
    use rustls::{CertificateError as C, Error as E};
    let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<E>()) else {
        return "";
    };
    match inner {
        E::InvalidCertificate(C::UnknownIssuer) => {
            " (not issued by this cluster's CA: another CA, a self-signed certificate, or a \
             chain without its intermediate)"
        }
        E::InvalidCertificate(C::BadSignature) => {
            " (a signature does not verify: the certificate is signed by another CA of the \
             same name, or the peer's key is not its certificate's)"
        }
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            " (not valid yet: issued for the future, or this clock is behind)"
        }
        E::InvalidCertificate(C::InvalidPurpose | C::InvalidPurposeContext { .. }) => {
            " (the certificate is not for this use: a node needs serverAuth and clientAuth, a \
             client clientAuth)"
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            " (the certificate is not for the node dialled)"
        }
        E::NoCertificatesPresented => " (a certificate of the cluster CA is required)",
        E::InvalidMessage(_) => " (not TLS: plain TCP to a node that requires mutual TLS?)",
        _ => "",
    }
}

/// The identity the peer of a server stream proved (its leaf certificate).
pub fn peer_identity(stream: &ServerStream, nodes: &[NodeId]) -> PeerIdentity {
    match stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
    {
        Some(leaf) => identify(leaf, nodes),
        None => PeerIdentity::Unnamed,
    }
}
