//! etcd's v3 gRPC API on Partita's key-value service (`partita-kv`), so that etcd's
//! clients (`etcdctl`, clientv3, python-etcd3) work against a Partita cluster.
//!
//! **Where it runs.** Inside `partita node`, on every replica of a `service = "kv"`
//! cluster whose `[[node]]` entry has an `etcd_addr` ([`serve`]): the one store, or
//! the store's keys as objects of S-SMR/DS-SMR (`partita_dssmr::kv`; its sessions
//! are `partita_client::kv::KvClient`s, as `partita kv`'s are), where the gateway
//! serves the KV RPCs, watches and leases (expiring them: [`Gateway::start_expiring`])
//! and compactions, and refuses what that store keeps no store-wide state for
//! (hashes, snapshots) with `UNIMPLEMENTED` and the reason. The gateway is
//! a client of the cluster like any other: it executes requests as Partita commands
//! through [`partita_client::Client`] sessions (a pool), preferring its own node as the
//! replica that answers. Requests in flight together are ordered as one
//! `KvCommand::Batch` (up to 256 requests or 256 KiB, at most 8 batches in flight:
//! while they are, requests queue and the next batch takes them all), which the store
//! executes request by request, each as if alone and with its own revision; the
//! outcome of a batch (a reply, or a timeout whose outcome is unknown) is that of each
//! request in it. A partitioned cluster gets no batching (a batch could span
//! partitions).
//!
//! **What maps to what.**
//!
//! | etcd | Partita |
//! | --- | --- |
//! | `KV.Range` | `KvCommand::Range`, ordered through the cluster (linearizable; a `serializable` request gets the same, stronger, read); sorting done here on the whole range |
//! | `KV.Put`, `KV.DeleteRange`, `KV.Txn` | `Put`, `DeleteRange`, `Txn` |
//! | `KV.Compact` | `KvCommand::Compact`: drops the replicated event history below the revision |
//! | `Watch.Watch` | per watcher, `KvCommand::Events` reads of the replicated event history from its next revision, every 5 ms backing off to 100 ms while idle |
//! | `Maintenance.Status` | the store's revision (an ordered read), the node's newest delivered ballot round as `raftTerm` and its leader as `leader`, the replica's executed instance as `raftIndex` |
//! | `Cluster.MemberList` | the replicas with an `etcd_addr`, and those added at run time (learners flagged), less the removed ones, from this node's status |
//! | `Cluster.MemberAdd`, `MemberRemove`, `MemberPromote` | `partita member add`, `remove`, `promote` (`MemberChange` ordered through this node; a promotion asked of the learner itself): the new member's id is that of its `join = true` entry in the cluster file at the peer URL's address, else one above every id used; it joins as a learner and, unless `isLearner`, promotes itself once caught up; refusals carry etcd's messages |
//! | `Lease.*` | `KvCommand::LeaseGrant`, `LeaseRevoke`, `LeaseKeepAlive` (each keep-alive of the stream ordered, batched with the requests in flight), `LeaseTimeToLive`, `LeaseLeases`: leases are replicated state, expired in ordered time (on S-SMR/DS-SMR by the gateways' ordered `LeaseExpire` checks) |
//! | `Maintenance.Hash`, `HashKV` | `KvCommand::Hash`, an ordered read of the store's digest |
//! | `Maintenance.Snapshot` | this member's replica checkpoint (`partita snapshot save`'s backup), in etcd's snapshot file layout |
//! | `Maintenance.Alarm` | NOSPACE for every member whose status says its log is stalled on a full disk ([`Gateway::follow_status`]) |
//! | `Maintenance.Defragment` | nothing to do: answered as done |
//!
//! Response headers carry the cluster id, this node's id as `member_id`, the store's
//! revision and the ballot round plus one as `raft_term`. Auth, membership changes,
//! leader moves, downgrades, compare ranges and nested transactions are refused with
//! `UNIMPLEMENTED` and a message naming what is missing; malformed requests get
//! `INVALID_ARGUMENT` (see [`convert`]); a request the store refuses as it executes it
//! (a missing lease, a compacted revision) gets etcd's status.
//! docs/etcd-compatibility.md lists every RPC and field.

// tonic's `Status` (176 bytes) is the error of every handler and of the mappings that
// feed them, once per request: boxing it would buy nothing.
#![allow(clippy::result_large_err)]

pub mod convert;
pub mod server;

/// The generated messages and services (from `proto/`, compiled by protox at build
/// time).
pub mod pb {
    #![allow(clippy::all, clippy::pedantic)]
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

use pb::etcdserverpb::{
    auth_server::AuthServer, cluster_server::ClusterServer, kv_server::KvServer,
    lease_server::LeaseServer, maintenance_server::MaintenanceServer, watch_server::WatchServer,
};
pub use server::{Gateway, Planted};

/// The connections `listener` accepts, with Nagle's algorithm off. tonic sets
/// `TCP_NODELAY` only on connections it accepts itself; with our own listener it is
/// ours to set. With Nagle on, a response's later frames (HTTP/2 data, then trailers,
/// written separately while other streams share the connection) wait for the ACK of
/// the earlier ones, which the client delays by up to 40 ms: most puts of 256
/// concurrent clients took 42 ms at the gateway.
fn nodelay(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
        if let Ok(s) = &s {
            let _ = s.set_nodelay(true);
        }
        s
    })
}

/// Serve etcd's API on `listener` for node `node` of `cluster`, until the process
/// ends. Requests go to the cluster through Partita's client.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cluster: partita_config::ClusterConfig,
    node: partita_types::NodeId,
    planted: Planted,
) -> anyhow::Result<()> {
    // Validated when the cluster file was read.
    let compaction = cluster.etcd.auto_compaction();
    let gw = Gateway::new(cluster, node);
    gw.plant(planted);
    gw.start_batching();
    tokio::spawn(gw.clone().follow_status());
    gw.start_expiring();
    if let Ok(mode) = compaction {
        tokio::spawn(gw.clone().auto_compact(mode));
    }
    let svc = server::Svc(gw);
    tonic::transport::Server::builder()
        .add_service(KvServer::new(svc.clone()))
        .add_service(WatchServer::new(svc.clone()))
        .add_service(MaintenanceServer::new(svc.clone()))
        .add_service(ClusterServer::new(svc.clone()))
        .add_service(LeaseServer::new(svc.clone()))
        .add_service(AuthServer::new(svc))
        .serve_with_incoming(nodelay(listener))
        .await?;
    Ok(())
}
