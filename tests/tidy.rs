//! Tidy: the core crates stay sans-IO and deterministic (DESIGN.md §2).
//!
//! Every source file of every core crate is parsed (`syn`) and every path in it is
//! looked at, in `use` trees (nested ones too: `use std::{net, thread}`) and in code:
//! no tokio, no sockets, threads, files, processes or environment, no clocks, no
//! unseeded randomness, and no hash map or set whose iteration order depends on a
//! random seed (`HashMap::new()`, `HashMap<K, V>` with the default hasher,
//! `RandomState`); cores use `partita_types::DetHashMap`, whose order is a function of
//! the inputs, so the simulator replays a seed bit for bit. A control feeds the
//! checker sources with each kind of violation and asserts it names each one.

use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// The crates whose code must be sans-IO, and files in them that are not core code.
const CORE_CRATES: [&str; 10] = [
    "types",
    "service",
    "btree",
    "consensus",
    "smr",
    "node",
    "client-core",
    "kv",
    "dssmr",
    "geo",
];

/// Files of core crates that are tools, not cores: the B+tree's own benchmark times
/// operations with a clock.
const NOT_CORE: [&str; 1] = ["btree/src/bench.rs"];

/// Path prefixes no core may name (matched on whole segments).
const FORBIDDEN_PATHS: [&[&str]; 13] = [
    &["tokio"],
    &["std", "net"],
    &["std", "thread"],
    &["std", "fs"],
    &["std", "process"],
    &["std", "env"],
    &["std", "time", "Instant"],
    &["std", "time", "SystemTime"],
    &["Instant", "now"],
    &["SystemTime", "now"],
    &["rand", "thread_rng"],
    &["rand", "random"],
    &["std", "collections", "hash_map", "RandomState"],
];

#[derive(Debug, PartialEq, Eq)]
struct Violation {
    line: usize,
    what: String,
}

struct Finder {
    found: Vec<Violation>,
    /// Prefixes of `use` trees being walked.
    prefix: Vec<String>,
}

impl Finder {
    fn flag(&mut self, span: proc_macro2::Span, what: String) {
        self.found.push(Violation {
            line: span.start().line,
            what,
        });
    }

    fn check_segments(&mut self, segs: &[String], span: proc_macro2::Span) {
        for f in FORBIDDEN_PATHS {
            if segs
                .windows(f.len())
                .any(|w| w.iter().zip(f.iter()).all(|(a, b)| a == b))
            {
                self.flag(span, format!("names `{}`", f.join("::")));
            }
        }
        if segs.iter().any(|s| s == "RandomState") {
            self.flag(span, "names RandomState (a randomly seeded hasher)".into());
        }
        // `HashMap::new()`, `HashSet::with_capacity(n)`, ...: the default hasher.
        for w in segs.windows(2) {
            if (w[0] == "HashMap" || w[0] == "HashSet")
                && ["new", "with_capacity", "from", "from_iter"].contains(&w[1].as_str())
            {
                self.flag(
                    span,
                    format!(
                        "builds a {} with a randomly seeded hasher ({}::{}); use partita_types::DetHashMap",
                        w[0], w[0], w[1]
                    ),
                );
            }
        }
    }
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_use_tree(&mut self, t: &'ast syn::UseTree) {
        match t {
            syn::UseTree::Path(p) => {
                self.prefix.push(p.ident.to_string());
                self.visit_use_tree(&p.tree);
                self.prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut segs = self.prefix.clone();
                segs.push(n.ident.to_string());
                self.check_segments(&segs, n.ident.span());
            }
            syn::UseTree::Rename(r) => {
                let mut segs = self.prefix.clone();
                segs.push(r.ident.to_string());
                self.check_segments(&segs, r.ident.span());
            }
            syn::UseTree::Glob(g) => {
                let segs = self.prefix.clone();
                self.check_segments(&segs, g.star_token.span);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.visit_use_tree(t);
                }
            }
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let span = p
            .segments
            .first()
            .map_or_else(proc_macro2::Span::call_site, |s| s.ident.span());
        self.check_segments(&segs, span);
        // A `HashMap<K, V>` / `HashSet<T>` type with the default (random) hasher.
        if let Some(last) = p.segments.last() {
            let args = match &last.arguments {
                syn::PathArguments::AngleBracketed(a) => a.args.len(),
                _ => usize::MAX,
            };
            let name = last.ident.to_string();
            if (name == "HashMap" && args == 2) || (name == "HashSet" && args == 1) {
                self.flag(
                    last.ident.span(),
                    format!("a {name} with the default, randomly seeded hasher; use partita_types::DetHashMap"),
                );
            }
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Macro bodies are not parsed as code; look at their tokens' text for the
        // forbidden paths written out in full.
        let text = m.tokens.to_string().replace(' ', "");
        for f in FORBIDDEN_PATHS.iter().filter(|f| f.len() > 1) {
            if text.contains(&f.join("::")) {
                self.flag(
                    m.path.segments[0].ident.span(),
                    format!("names `{}` in a macro", f.join("::")),
                );
            }
        }
        syn::visit::visit_macro(self, m);
    }
}

/// Every violation in one source file's text.
fn violations(source: &str) -> Result<Vec<Violation>, String> {
    let file = syn::parse_file(source).map_err(|e| e.to_string())?;
    let mut f = Finder {
        found: Vec::new(),
        prefix: Vec::new(),
    };
    f.visit_file(&file);
    Ok(f.found)
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn core_crates_are_sans_io_and_deterministic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut problems = Vec::new();
    let mut checked = 0;
    for krate in CORE_CRATES {
        let src = root.join(krate).join("src");
        if !src.exists() {
            continue;
        }
        for file in rust_files(&src) {
            let rel = file
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if NOT_CORE.contains(&rel.as_str()) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            match violations(&text) {
                Ok(v) => problems.extend(
                    v.into_iter()
                        .map(|v| format!("{rel}:{}: {}", v.line, v.what)),
                ),
                Err(e) => problems.push(format!("{rel}: does not parse: {e}")),
            }
            checked += 1;
        }
    }
    assert!(
        problems.is_empty(),
        "core crates must be sans-IO and deterministic:\n{}",
        problems.join("\n")
    );
    assert!(
        checked >= 25,
        "tidy checked only {checked} files: is the layout still right?"
    );
}

/// The control: each kind of violation, written the ways code writes it, is caught.
#[test]
fn the_tidy_check_catches_each_kind_of_violation() {
    let cases = [
        ("use tokio::net::TcpStream;", "tokio"),
        ("use std::{net::TcpStream, io};", "std::net"),
        ("use std::{thread};", "std::thread"),
        ("use std::{fs as files};", "std::fs"),
        (
            "fn f() { let _ = std::time::Instant::now(); }",
            "std::time::Instant",
        ),
        (
            "use std::time::Instant; fn f() { let _ = Instant::now(); }",
            "Instant::now",
        ),
        ("fn f() -> u64 { rand::random() }", "rand::random"),
        (
            "use std::collections::HashMap; fn f() { let _m: HashMap<u8, u8> = HashMap::new(); }",
            "HashMap::new",
        ),
        (
            "struct S { m: std::collections::HashMap<u8, u8> }",
            "default, randomly seeded hasher",
        ),
        (
            "fn f() { let _ = std::collections::hash_map::RandomState::new(); }",
            "RandomState",
        ),
        (
            "fn f() { println!(\"{:?}\", std::time::SystemTime::now()); }",
            "std::time::SystemTime",
        ),
        ("fn f() { let _ = std::env::var(\"X\"); }", "std::env"),
    ];
    for (source, want) in cases {
        let v = violations(source).expect("parses");
        assert!(
            v.iter().any(|x| x.what.contains(want)),
            "`{source}` was not flagged for {want}: {v:?}"
        );
    }
    // And what cores may write passes.
    let fine = "use partita_types::DetHashMap; use std::collections::BTreeMap; \
                struct S { m: DetHashMap<u8, u8>, b: BTreeMap<u8, u8> } \
                fn f() -> S { S { m: DetHashMap::default(), b: BTreeMap::new() } }";
    assert_eq!(violations(fine).unwrap(), vec![]);
}
