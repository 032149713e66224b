//! `partita member list|add|remove|promote`: the replicas and acceptors of a running
//! cluster.
//!
//! A change goes to a replica over a one-shot connection (`Wire::MemberRequest`),
//! which orders it; the answer comes once the change is applied there (or refused, with
//! etcd's reasons). A new replica's node entry is in the operator's copy of the cluster
//! file with `join = true` (where its process reads it: `partita node --id N`); `add`
//! takes its address from there unless `--addr` says. A joining replica catches up as
//! a learner and promotes itself once caught up (unless added with `--learner`; then
//! `promote` asks it to). `add --acceptor` and `remove --acceptor` change the acceptors:
//! each change starts a new ordering epoch at the instance after it (see
//! `partita_types::members`), and a new acceptor needs no history.

use anyhow::{anyhow, bail};
use partita_config::{ClusterConfig, Role};
use partita_types::members::{MemberChange, Members};
use partita_types::NodeId;
use partita_wire::NodeStatus;
use std::time::Duration;

/// How long a change may take to be ordered and applied.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(15);
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// The newest replicas among nodes' statuses (the highest epoch; `None` when none
/// reports them: an ordering that cannot change its replicas).
pub fn newest<'a>(statuses: impl IntoIterator<Item = &'a NodeStatus>) -> Option<Members> {
    statuses
        .into_iter()
        .filter_map(|s| s.members.as_ref())
        .max_by_key(|m| m.epoch)
        .cloned()
}

/// Every node of the cluster file's status (`None`: it did not answer).
async fn file_statuses(cluster: &ClusterConfig) -> Vec<(NodeId, Option<NodeStatus>)> {
    let mut out = Vec::new();
    for n in &cluster.nodes {
        let s = partita_client::node_status_of(cluster, n.id, STATUS_TIMEOUT).await;
        out.push((n.id, s));
    }
    out
}

/// The newest replicas the nodes say, from their statuses.
fn newest_of(statuses: &[(NodeId, Option<NodeStatus>)]) -> anyhow::Result<Members> {
    if statuses.iter().all(|(_, s)| s.is_none()) {
        bail!("no node of the cluster file answered");
    }
    newest(statuses.iter().filter_map(|(_, s)| s.as_ref())).ok_or_else(|| {
        anyhow!(
            "this cluster's ordering cannot change its replicas (Ring Paxos and Multi-Paxos can)"
        )
    })
}

/// The newest replicas any node of the cluster file knows.
async fn newest_members(cluster: &ClusterConfig) -> anyhow::Result<Members> {
    newest_of(&file_statuses(cluster).await)
}

/// `partita member list`.
pub async fn list(cluster: &ClusterConfig, json: bool) -> anyhow::Result<()> {
    let mut all = file_statuses(cluster).await;
    let members = newest_of(&all)?;
    // Replicas added at run time that the file does not name, reached at the address
    // their change carried.
    let mut with = cluster.clone();
    let added: Vec<(NodeId, String)> = members
        .added()
        .map(|(n, a)| (n, a.to_string()))
        .chain(members.acceptor_addrs.iter().map(|(&n, a)| (n, a.clone())))
        .collect();
    for (id, addr) in added {
        if cluster.node(id).is_none() && !all.iter().any(|(n, _)| *n == id) {
            with.nodes
                .push(partita_config::NodeSection::joining_replica(
                    id,
                    addr.to_string(),
                ));
            let s = partita_client::node_status_of(&with, id, STATUS_TIMEOUT).await;
            all.push((id, s));
        }
    }
    all.sort_by_key(|(id, _)| *id);
    let initial: Vec<NodeId> = cluster.with_role(Role::Replica);
    let acceptors = members.acceptors(&cluster.with_role(Role::Acceptor));
    let mut rows = Vec::new();
    for (id, status) in all {
        let file = cluster.node(id);
        let addr = members
            .replicas
            .get(&id)
            .and_then(|r| r.addr.clone())
            .or_else(|| members.acceptor_addrs.get(&id).cloned())
            .or_else(|| file.map(|n| n.addr.clone()))
            .unwrap_or_default();
        let mut roles: Vec<String> = file
            .map(|n| {
                n.roles
                    .iter()
                    .filter(|r| !matches!(r, Role::Replica | Role::Acceptor))
                    .map(|r| format!("{r:?}").to_lowercase())
                    .collect()
            })
            .unwrap_or_default();
        let file_acceptor = file.is_some_and(|n| n.roles.contains(&Role::Acceptor));
        if acceptors.contains(&id) {
            roles.push("acceptor".into());
        } else if members.acceptors_removed.contains(&id) {
            roles.push("acceptor (removed)".into());
        } else if file_acceptor && file.is_some_and(|n| n.join) {
            roles.push("acceptor (not added)".into());
        }
        let replica = if members.removed.contains(&id) {
            Some("removed")
        } else if members.is_learner(id) {
            Some("learner")
        } else if members.is_replica(&initial, id) {
            Some("replica")
        } else if file.is_some_and(|n| n.join) {
            Some("joining (not added)")
        } else {
            None
        };
        if let Some(r) = replica {
            roles.push(r.to_string());
        }
        // Partitioned: the partition a replica holds (as added, or the file's).
        let partition = members
            .replicas
            .get(&id)
            .map(|r| r.partition)
            .or_else(|| file.and_then(|n| n.partition))
            .filter(|_| replica.is_some() && cluster.partitioning.partitions > 1);
        rows.push(serde_json::json!({
            "id": id,
            "addr": addr,
            "roles": roles,
            "partition": partition,
            "answers": status.is_some(),
            "executed_up_to": status.as_ref().and_then(|s| s.executed_up_to),
        }));
    }
    // Multi-Ring Paxos: each ring's acceptors (fixed by the file) and the partitions
    // it carries (`None`: every one).
    let rings = cluster
        .ordering
        .multiring()
        .map_or(&[][..], |m| &m.rings[..]);
    if json {
        let mut out = serde_json::json!({
            "epoch": members.epoch,
            "changed_at": members.at,
            "ordering_epoch": members.ordering_epoch,
            "acceptors": acceptors,
            "acceptors_from": members.ordering_from(),
            "members": rows,
        });
        if !rings.is_empty() {
            out["rings"] = rings
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "id": r.id,
                        "acceptors": r.acceptors,
                        "partitions": r.groups,
                    })
                })
                .collect();
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "configuration epoch {} (last change at position {}); ordering epoch {}: \
         acceptors {:?} from instance {}",
        members.epoch,
        members.at,
        members.ordering_epoch,
        acceptors,
        members.ordering_from()
    );
    for r in rings {
        let partitions = match &r.groups {
            Some(p) => format!("partitions {p:?}"),
            None => "every partition".to_string(),
        };
        println!(
            "ring {}: acceptors {:?} (fixed by the cluster file), {partitions}",
            r.id, r.acceptors
        );
    }
    println!(
        "{:>4}  {:<24} {:<30} {:>8}  executed",
        "id", "address", "roles", "answers"
    );
    for r in rows {
        let mut roles: Vec<String> = r["roles"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(p) = r["partition"].as_u64() {
            roles.push(format!("partition {p}"));
        }
        println!(
            "{:>4}  {:<24} {:<30} {:>8}  {}",
            r["id"],
            r["addr"].as_str().unwrap_or(""),
            roles.join(","),
            if r["answers"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            r["executed_up_to"]
                .as_u64()
                .map_or("-".to_string(), |e| e.to_string())
        );
    }
    Ok(())
}

/// Send `change` to the replicas in turn until one orders it. Returns the replicas
/// after it.
async fn order(cluster: &ClusterConfig, change: MemberChange) -> anyhow::Result<Members> {
    let members = newest_members(cluster).await?;
    let initial = cluster.with_role(Role::Replica);
    let targets: Vec<(NodeId, String)> = members
        .serving(&initial)
        .into_iter()
        .filter(|&n| n != change.node())
        .filter_map(|n| {
            let addr = members
                .replicas
                .get(&n)
                .and_then(|r| r.addr.clone())
                .or_else(|| cluster.node(n).map(|_| cluster.dial_addr(n).to_string()))?;
            Some((n, addr))
        })
        .collect();
    let mut errors = Vec::new();
    for (id, addr) in targets {
        match partita_client::member_request(cluster, id, &addr, change.clone(), CHANGE_TIMEOUT)
            .await
        {
            Ok(m) => return Ok(m),
            // Refused where it was ordered: the same everywhere, so final.
            Err(why) if !why.starts_with(&format!("node {id}")) => bail!("{why}"),
            Err(why) => errors.push(why),
        }
    }
    bail!("no replica ordered the change: {}", errors.join("; "))
}

/// How `partita member add` adds a replica.
#[derive(Clone, Copy, Debug, Default)]
pub struct NewReplica {
    /// Keep it a learner once caught up (until `promote`).
    pub learner: bool,
    /// The partition it replicates (default: its entry in the cluster file's).
    pub partition: Option<u32>,
}

/// `partita member add`.
pub async fn add(
    cluster: &ClusterConfig,
    node: NodeId,
    addr: Option<String>,
    replica: NewReplica,
    acceptor: bool,
) -> anyhow::Result<()> {
    let NewReplica { learner, partition } = replica;
    let allowed = match acceptor {
        true => cluster.acceptor_changes(),
        false => cluster.member_changes(),
    };
    if let Err(why) = allowed {
        bail!("{why}");
    }
    let addr = match (addr, cluster.node(node)) {
        (Some(a), _) => a,
        (None, Some(n)) if n.join => n.addr.clone(),
        (None, Some(_)) => bail!(
            "node {node} is one of the cluster file's initial nodes; a new {} needs a \
             new id (its entry in the file with `join = true`, or --addr)",
            if acceptor { "acceptor" } else { "replica" }
        ),
        (None, None) => bail!(
            "the cluster file has no node {node}: give its address with --addr, or add its \
             entry with `join = true`"
        ),
    };
    if acceptor {
        let m = order(
            cluster,
            MemberChange::AddAcceptor {
                node,
                addr: addr.clone(),
            },
        )
        .await?;
        println!(
            "added node {node} at {addr} as an acceptor: ordering epoch {} from instance {} \
             (acceptors {:?})",
            m.ordering_epoch,
            m.ordering_from(),
            m.acceptors
        );
        return Ok(());
    }
    let partitions = cluster.partitioning.partitions;
    let in_file = cluster.node(node).and_then(|n| n.partition);
    if let (Some(p), Some(f)) = (partition, in_file.filter(|_| partitions > 1)) {
        if p != f {
            bail!(
                "node {node}'s entry in the cluster file says partition {f}, which its \
                 process replicates: it cannot join partition {p}"
            );
        }
    }
    // (A partition the cluster does not have is refused by the replica that orders
    // the change, with the partitions it has.)
    let partition = match partition.or(in_file) {
        Some(p) => p,
        None if partitions > 1 => bail!(
            "the cluster has {partitions} partitions: say which one node {node} replicates \
             (--partition, or `partition` in its entry of the cluster file)"
        ),
        None => 0,
    };
    let m = order(
        cluster,
        MemberChange::Add {
            node,
            addr: addr.clone(),
            partition,
            promote: !learner,
        },
    )
    .await?;
    println!(
        "added node {node} at {addr} as a learner (configuration epoch {}, position {}); {}",
        m.epoch,
        m.at,
        if learner {
            "promote it with `partita member promote` once it caught up"
        } else {
            "it serves once it caught up"
        }
    );
    Ok(())
}

/// `partita member remove`.
pub async fn remove(cluster: &ClusterConfig, node: NodeId, acceptor: bool) -> anyhow::Result<()> {
    if acceptor {
        if let Err(why) = cluster.acceptor_changes() {
            bail!("{why}");
        }
        let m = order(cluster, MemberChange::RemoveAcceptor { node }).await?;
        println!(
            "removed acceptor {node}: ordering epoch {} from instance {} (acceptors {:?}); \
             a node that only accepts stops by itself",
            m.ordering_epoch,
            m.ordering_from(),
            m.acceptors
        );
        return Ok(());
    }
    let m = order(cluster, MemberChange::Remove { node }).await?;
    println!(
        "removed node {node} (configuration epoch {}, position {}); it stops by itself",
        m.epoch, m.at
    );
    Ok(())
}

/// `partita member promote`: asks the learner itself, which refuses while behind.
pub async fn promote(cluster: &ClusterConfig, node: NodeId) -> anyhow::Result<()> {
    let members = newest_members(cluster).await?;
    let addr = members
        .replicas
        .get(&node)
        .and_then(|r| r.addr.clone())
        .ok_or_else(|| anyhow!("can only promote a learner member; node {node} is not one"))?;
    let m = partita_client::member_request(
        cluster,
        node,
        &addr,
        MemberChange::Promote { node },
        CHANGE_TIMEOUT,
    )
    .await
    .map_err(|e| anyhow!(e))?;
    println!(
        "promoted node {node}: it serves (configuration epoch {}, position {})",
        m.epoch, m.at
    );
    Ok(())
}
