//! The services this program can run, by the name a cluster file gives
//! (`[cluster] service`).

use partita_smr::ServiceFactory;
use std::sync::Arc;

/// Every built-in service's name.
pub use partita_config::services::BUILTIN;

/// The factory of the built-in service called `name`, as a cluster ordered by one
/// Paxos stream runs it (Chirper's replicas need the cluster file's [chirper] section and model,
/// and every service's placement the cluster's ordering: `for_cluster`).
pub fn builtin(name: &str) -> Option<Arc<dyn ServiceFactory>> {
    let mut c = partita_config::ClusterConfig::default_local(7100, 1);
    c.cluster.service = name.to_string();
    partita_config::services::factory(&c)
}

/// The factory a node of `cluster` runs: [`builtin`], or for `service = "chirper"`
/// the S-SMR/DS-SMR replicas of its `[chirper]` section (every replica loads the same
/// social graph), or for `service = "kv"` on S-SMR/DS-SMR the key-value store's
/// (`partita_dssmr::kv`), with the planted bugs among `unsafe_bugs` (`ds-...`, for the
/// checks' controls) in them.
pub fn for_cluster(
    cluster: &partita_config::ClusterConfig,
    unsafe_bugs: &[String],
) -> anyhow::Result<Arc<dyn ServiceFactory>> {
    let on = |name: &str| unsafe_bugs.iter().any(|b| b == name);
    let planted = partita_dssmr::server::Planted {
        locality_at_consult: on("ds-locality-at-consult"),
        oracle_ignores_moves: on("ds-oracle-ignores-moves"),
        no_signals: on("ds-no-signals"),
    };
    if cluster.cluster.service == "kv" && cluster.execution.is_ssmr() {
        // Keys hashed to partitions, none loaded (`partita_dssmr::kv`).
        return Ok(partita_dssmr::replica::factory_planted::<
            partita_dssmr::kv::KvObjects,
        >(
            scheme_of(cluster)?,
            partita_dssmr::StaticMap::Hashed,
            Arc::new(Vec::new),
            planted,
        ));
    }
    if cluster.cluster.service != "chirper" {
        return partita_config::services::factory(cluster)
            .map_or_else(|| resolve(&cluster.cluster.service), Ok);
    }
    let (scheme, static_map, spec) = chirper_params(cluster)?;
    let graph = Arc::new(partita_dssmr::chirper::Graph::generate(&spec));
    Ok(partita_dssmr::replica::factory_planted::<
        partita_dssmr::chirper::Chirper,
    >(
        scheme,
        static_map,
        Arc::new(move || graph.objects()),
        planted,
    ))
}

/// A Chirper cluster's scheme, static map and social graph (its `[execution] model` and `[chirper]` section).
pub fn chirper_params(
    cluster: &partita_config::ClusterConfig,
) -> anyhow::Result<(
    partita_dssmr::client::Scheme,
    partita_dssmr::StaticMap,
    partita_dssmr::chirper::GraphSpec,
)> {
    let d = cluster
        .chirper
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("a chirper cluster file needs a [chirper] section"))?;
    let scheme = scheme_of(cluster)?;
    let static_map = partita_dssmr::StaticMap::parse(&d.placement).map_err(anyhow::Error::msg)?;
    Ok((
        scheme,
        static_map,
        partita_dssmr::chirper::GraphSpec {
            users: d.users,
            communities: d.communities,
            mean_followers: f64::from(d.mean_followers),
            p_local: f64::from(d.p_local_percent) / 100.0,
            seed: d.seed,
            scattered: false,
        },
    ))
}

/// The partitioning scheme of an S-SMR or DS-SMR cluster.
fn scheme_of(
    cluster: &partita_config::ClusterConfig,
) -> anyhow::Result<partita_dssmr::client::Scheme> {
    use partita_dssmr::client::Scheme;
    match cluster.execution.model() {
        partita_config::ExecutionModel::Ssmr => Ok(Scheme::Ssmr),
        partita_config::ExecutionModel::Dssmr => Ok(Scheme::Dssmr),
        other => anyhow::bail!(
            "`{}` runs on S-SMR or DS-SMR here, not on {other}",
            cluster.cluster.service
        ),
    }
}

/// [`builtin`], or an error naming the known services.
pub fn resolve(name: &str) -> anyhow::Result<Arc<dyn ServiceFactory>> {
    builtin(name).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown service `{name}` (this program runs: {}); a service of your own runs \
             with a program of your own (see examples/)",
            BUILTIN.join(", ")
        )
    })
}
