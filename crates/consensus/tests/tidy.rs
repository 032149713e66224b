//! Core crates must stay sans-IO: no tokio, sockets, threads or clocks (DESIGN.md §2).

#[test]
fn core_crates_do_no_io() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let forbidden = [
        "tokio",
        "std::net",
        "std::thread",
        "Instant::now",
        "SystemTime",
        "std::fs",
    ];
    let mut checked = 0;
    for krate in ["consensus", "smr", "btree", "node"] {
        let src = root.join(krate).join("src");
        let Ok(entries) = std::fs::read_dir(&src) else {
            continue;
        };
        let mut stack: Vec<std::path::PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            if p.extension().is_none_or(|e| e != "rs") || p.ends_with("bench.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for f in forbidden {
                assert!(
                    !text.contains(f),
                    "{} uses {f}: core crates must be sans-IO",
                    p.display()
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 4,
        "tidy found only {checked} files: is the layout still right?"
    );
}
