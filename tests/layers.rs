//! The layers stand apart (ARCHITECTURE.md): the simulator depends neither on the
//! tokio runtime nor on tokio, and the client does not depend on the runtime. Checked
//! on the resolved dependency graph (`cargo metadata`), normal dependencies only, so
//! that a dependency slipped in through another crate is caught too.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The host's target triple (`rustc -vV`), so that the graph is this platform's.
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("-vV").output().expect("rustc runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

/// package name -> names of its normal (non-dev, non-build) dependencies, resolved.
fn graph() -> BTreeMap<String, Vec<String>> {
    static GRAPH: std::sync::OnceLock<BTreeMap<String, Vec<String>>> = std::sync::OnceLock::new();
    GRAPH.get_or_init(read_graph).clone()
}

fn read_graph() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--filter-platform"])
        .arg(host_triple())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let name_of: BTreeMap<String, String> = v["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_string(),
                p["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut g = BTreeMap::new();
    for node in v["resolve"]["nodes"].as_array().unwrap() {
        let name = name_of[node["id"].as_str().unwrap()].clone();
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].is_null())
            })
            .map(|d| name_of[d["pkg"].as_str().unwrap()].clone())
            .collect();
        g.insert(name, deps);
    }
    g
}

/// Every package `root` depends on, directly or not (normal dependencies).
fn closure(g: &BTreeMap<String, Vec<String>>, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![root.to_string()];
    while let Some(p) = stack.pop() {
        for d in g
            .get(&p)
            .unwrap_or_else(|| panic!("package {p} not in the graph"))
        {
            if seen.insert(d.clone()) {
                stack.push(d.clone());
            }
        }
    }
    seen
}

fn assert_apart(g: &BTreeMap<String, Vec<String>>, root: &str, forbidden: &[&str]) {
    let deps = closure(g, root);
    for f in forbidden {
        assert!(
            !deps.contains(*f),
            "{root} depends on {f} (directly or through another crate); its dependencies: {deps:?}"
        );
    }
}

#[test]
fn the_simulator_needs_neither_the_runtime_nor_tokio() {
    let g = graph();
    assert_apart(
        &g,
        "partita-sim",
        &["partita-runtime", "tokio", "partita-net"],
    );
}

#[test]
fn the_client_does_not_need_the_runtime() {
    let g = graph();
    assert_apart(&g, "partita-client", &["partita-runtime", "partita-wal"]);
}

#[test]
fn cluster_file_and_wire_sit_below_both_drivers() {
    let g = graph();
    for layer in ["partita-config", "partita-wire"] {
        assert_apart(
            &g,
            layer,
            &["partita-runtime", "partita-sim", "tokio", "partita-client"],
        );
    }
    for driver in ["partita-runtime", "partita-sim"] {
        let deps = closure(&g, driver);
        assert!(deps.contains("partita-config") && deps.contains("partita-wire"));
    }
}

/// Commands cross ordering as opaque bytes: the ordering protocols and the node's
/// ordering seam know no service (the B+tree appears only in their tests).
#[test]
fn ordering_knows_no_service() {
    let g = graph();
    let services = ["partita-btree", "partita-kv", "partita-service"];
    assert_apart(&g, "partita-consensus", &services);
    assert_apart(&g, "partita-types", &services);
}

/// The control: the check does see a dependency that is there.
#[test]
fn the_check_catches_a_dependency_that_exists() {
    let g = graph();
    let deps = closure(&g, "partita-runtime");
    assert!(
        deps.contains("tokio"),
        "the runtime runs on tokio: {deps:?}"
    );
    let caught = std::panic::catch_unwind(|| assert_apart(&g, "partita-runtime", &["tokio"]));
    assert!(
        caught.is_err(),
        "a forbidden dependency must fail the check"
    );
}
