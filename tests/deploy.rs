//! The Kubernetes manifests in `deploy/kubernetes/` are what Kubernetes accepts, checked
//! offline against its own OpenAPI schemas, strictly (an unknown field is refused):
//! kubernetes-validate from PyPI, which `scripts/install-test-deps` installs. The
//! cluster file their ConfigMap carries is a valid cluster file whose nodes are the
//! StatefulSet's pods by name. Control: the same manifests with one misspelled field
//! are refused, naming it.

use partita_config::{ClusterConfig, Role};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VALIDATE: &str = "/var/cache/partita/kubernetes-validate/bin/kubernetes-validate";
const PYTHON: &str = "/var/cache/partita/kubernetes-validate/bin/python";

fn manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/partita.yaml")
}

fn validate(file: &Path) -> Output {
    Command::new(VALIDATE)
        .args(["--strict", "--kubernetes-version", "1.31.0"])
        .arg(file)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_kubernetes_manifests_pass_kubernetes_schemas() {
    crate::etcd::install("kubernetes-validate");
    let o = validate(&manifests());
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for kind in ["service", "configmap", "statefulset", "poddisruptionbudget"] {
        assert!(
            out.contains(&format!("passed for resource {kind}/partita")),
            "{kind}: {out}"
        );
    }

    // Control: a misspelled field is refused, by name.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let yaml = std::fs::read_to_string(manifests()).unwrap();
    assert!(yaml.contains("podManagementPolicy:"));
    std::fs::write(
        &bad,
        yaml.replace("podManagementPolicy:", "podManagementpolicy:"),
    )
    .unwrap();
    let o = validate(&bad);
    assert!(!o.status.success(), "a misspelled field passed");
    assert!(
        text(&o).contains("'podManagementpolicy' was unexpected"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_manifests_cluster_file_names_the_statefulsets_pods() {
    crate::etcd::install("kubernetes-validate");
    // The ConfigMap's cluster.toml, read with the YAML parser kubernetes-validate uses.
    let o = Command::new(PYTHON)
        .arg("-c")
        .arg(
            "import sys, yaml\n\
             for d in yaml.safe_load_all(open(sys.argv[1])):\n\
             \x20   if d and d['kind'] == 'ConfigMap':\n\
             \x20       sys.stdout.write(d['data']['cluster.toml'])\n",
        )
        .arg(manifests())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let toml = String::from_utf8(o.stdout).unwrap();
    let c = ClusterConfig::parse(&toml, "deploy/kubernetes/partita.yaml").unwrap();
    let yaml = std::fs::read_to_string(manifests()).unwrap();
    let replicas: usize = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("replicas: "))
        .and_then(|v| v.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let initial: Vec<_> = c.nodes.iter().filter(|n| !n.join).collect();
    assert_eq!(initial.len(), replicas, "a node per pod");
    for n in &c.nodes {
        assert_eq!(
            c.dial_addr(n.id),
            format!(
                "partita-{}.partita.default.svc.cluster.local:7100",
                n.id - 1
            )
        );
        match n.join {
            false => {
                assert!(n.roles.contains(&Role::Acceptor) && n.roles.contains(&Role::Replica))
            }
            // Scale-out: the next pods' nodes, replicas that join with `member add`.
            true => assert!(n.roles == [Role::Replica] && n.id as usize > replicas),
        }
    }
    assert!(c.nodes.iter().any(|n| n.join), "room to scale out");
    assert!(c.tls.is_some(), "mutual TLS between pods");
}
