//! `check_file` and the verdict line `partita check` prints.

use crate::common;

use std::path::PathBuf;

use common::*;
use partita_btree::OpResult;
use partita_checker::gen::{generate, GenConfig};
use partita_checker::{check_file, CheckOptions, HistoryWriter, Verdict};

/// A fresh path in the temp directory (removed on drop).
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!(
            "partita-checker-{}-{name}.jsonl",
            std::process::id()
        )))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn write(file: &TempFile, events: &[partita_checker::Event]) {
    let mut w = HistoryWriter::create(&file.0).unwrap();
    for e in events {
        w.write(e).unwrap();
    }
    w.flush().unwrap();
}

#[test]
fn linearizable_file() {
    let file = TempFile::new("ok");
    let g = generate(&GenConfig {
        seed: 5,
        ops: 500,
        keys: 20,
        ..GenConfig::default()
    });
    write(&file, &g.events);
    let report = check_file(&file.0, &CheckOptions::default()).unwrap();
    assert!(report.is_linearizable());
    assert_eq!(report.events, 500);
    let line = report.to_string();
    let Verdict::Linearizable(s) = &report.verdict else {
        unreachable!()
    };
    assert_eq!(
        line,
        format!(
            "linearizable: 500 operations on {} keys (states explored {})",
            s.keys, s.states
        )
    );
}

#[test]
fn violating_file() {
    let file = TempFile::new("bad");
    write(
        &file,
        &[
            ok(1, insert(5, 1), 0, 10, OpResult::Inserted(true)),
            ok(2, read(5), 20, 30, OpResult::Value(None)),
        ],
    );
    let report = check_file(&file.0, &CheckOptions::default()).unwrap();
    assert!(!report.is_linearizable());
    assert_eq!(
        report.to_string(),
        "NOT linearizable: client 2 read(5) [call 20 ns, ret 30 ns] returned value=null, \
         which no linearization allows: the model would return value=1 at that point \
         (after linearizing 1 earlier operation on key 5)"
    );
}

#[test]
fn unknown_verdict() {
    let file = TempFile::new("hard");
    let mut h: Vec<_> = (0..20)
        .map(|c| info(c, update(1, c + 100), 0, 10))
        .collect();
    h.insert(0, ok(99, insert(1, 1), 0, 1, OpResult::Inserted(true)));
    for (i, v) in [105, 103, 105].into_iter().enumerate() {
        let t = 20 + 10 * i as u64;
        h.push(ok(99, read(1), t, t + 5, OpResult::Value(Some(v))));
    }
    write(&file, &h);
    let opts = CheckOptions {
        max_states: 1_000,
        ..CheckOptions::default()
    };
    let report = check_file(&file.0, &opts).unwrap();
    assert!(matches!(report.verdict, Verdict::Unknown(_)));
    assert!(
        report
            .to_string()
            .starts_with("unknown: search gave up after"),
        "{report}"
    );
}

#[test]
fn malformed_file_is_an_error_naming_the_line() {
    let file = TempFile::new("malformed");
    std::fs::write(
        &file.0,
        "{\"client\":1,\"op\":\"read\",\"key\":1,\"call_ns\":0,\"ret_ns\":1,\"status\":\"ok\",\"result\":{\"value\":null}}\nnot json\n",
    )
    .unwrap();
    let err = check_file(&file.0, &CheckOptions::default()).unwrap_err();
    assert!(format!("{err:#}").contains("line 2"), "{err:#}");
    assert!(check_file("/nonexistent/h.jsonl", &CheckOptions::default()).is_err());
}
