//! Reading key-value history lines (DESIGN.md §2's format, with and without this
//! project's additions), refusing malformed ones by line, reading what `partita-kv`
//! records, and choosing the checker by the `service` field.

use crate::kv_common;

use std::io::Write;
use std::path::PathBuf;

use kv_common::*;
use partita_checker::history::Status;
use partita_checker::kv::{
    check_history_file, read_kv_history_from, KvEvent, KvOp, KvResult, ServiceReport, Target,
};
use partita_checker::{CheckOptions, Initial};
use partita_kv::history::{event_line, Outcome};
use partita_kv::{KvCommand, KvStore};

fn parse(line: &str) -> Result<KvEvent, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    KvEvent::from_json(&v)
}

#[test]
fn design_md_lines_parse() {
    let put = parse(
        r#"{"service":"kv","client":3,"op":"put","key":"a","value":{"hex":"ff00"},"call_ns":1,"ret_ns":2,"status":"ok","result":{"revision":2,"prev":null}}"#,
    )
    .unwrap();
    assert_eq!(
        put.op,
        KvOp::Put {
            key: "a".into(),
            value: vec![0xff, 0],
            prev_kv: false
        }
    );
    assert_eq!(
        put.result,
        Some(KvResult::Put {
            revision: 2,
            prev: Some(None)
        })
    );
    // A get in DESIGN.md's shape has no read revision.
    let get = parse(
        r#"{"service":"kv","client":3,"op":"get","key":"a","call_ns":1,"ret_ns":2,"status":"ok","result":{"value":"x","mod_revision":2,"version":1}}"#,
    )
    .unwrap();
    assert_eq!(get.result, Some(got(Some(("x", 2, 1)), None)));
    let txn = parse(
        r#"{"service":"kv","client":1,"op":"txn","compare":[{"key":"a","target":"mod","op":"<","value":5}],"then":[{"op":"put","key":"a","value":"1"}],"else":[{"op":"get","key":"a"},{"op":"del","key":"a","end":"b"}],"call_ns":1,"ret_ns":2,"status":"ok","result":{"succeeded":false,"results":[{"value":null,"mod_revision":null,"version":0},{"deleted":0,"revision":1}]}}"#,
    )
    .unwrap();
    let KvOp::Txn { compare, .. } = &txn.op else {
        panic!()
    };
    assert_eq!(compare[0].target, Target::Mod(5));
    let info = parse(
        r#"{"service":"kv","client":1,"op":"del","key":"a","call_ns":1,"ret_ns":2,"status":"info"}"#,
    )
    .unwrap();
    assert_eq!(info.status, Status::Info);
    assert_eq!(info.op, del("a"));
}

#[test]
fn malformed_lines_name_their_line() {
    let good = r#"{"service":"kv","client":1,"op":"get","key":"a","call_ns":0,"ret_ns":1,"status":"ok","result":{"value":null,"mod_revision":null,"version":0,"revision":1}}"#;
    let bad = [
        (
            r#"{"client":1,"op":"get","key":"a","call_ns":0,"ret_ns":1,"status":"fail"}"#,
            "needs `service: \"kv\"`",
        ),
        (
            r#"{"service":"kv","client":1,"op":"put","key":"a","call_ns":0,"ret_ns":1,"status":"fail"}"#,
            "put needs field `value`",
        ),
        (
            r#"{"service":"kv","client":1,"op":"get","key":"a","value":"x","call_ns":0,"ret_ns":1,"status":"fail"}"#,
            "get takes no field `value`",
        ),
        (
            r#"{"service":"kv","client":1,"op":"insert","key":1,"call_ns":0,"ret_ns":1,"status":"fail"}"#,
            "unknown kv op `insert`",
        ),
        (
            r#"{"service":"kv","client":1,"op":"get","key":{"hex":"zz"},"call_ns":0,"ret_ns":1,"status":"fail"}"#,
            "hex digits",
        ),
        (
            r#"{"service":"kv","client":1,"op":"get","key":"a","call_ns":0,"ret_ns":1,"status":"ok"}"#,
            "status ok needs a `result`",
        ),
        (
            r#"{"service":"kv","client":1,"op":"get","key":"a","call_ns":0,"ret_ns":1,"status":"info","result":{"value":null,"mod_revision":null,"version":0}}"#,
            "must not carry a `result`",
        ),
        (
            r#"{"service":"kv","client":1,"op":"get","key":"a","call_ns":0,"ret_ns":1,"status":"ok","result":{"revision":3}}"#,
            "get result needs field `value`",
        ),
        (
            r#"{"service":"kv","client":1,"op":"txn","compare":[],"then":[{"op":"txn","compare":[],"then":[],"else":[]}],"else":[],"call_ns":0,"ret_ns":1,"status":"fail"}"#,
            "a txn cannot hold a txn",
        ),
        (
            r#"{"service":"kv","client":1,"op":"txn","compare":[],"then":[{"op":"get","key":"a"}],"else":[],"call_ns":0,"ret_ns":1,"status":"ok","result":{"succeeded":true,"results":[]}}"#,
            "txn result has 0 results, but its then branch has 1",
        ),
        (
            r#"{"service":"kv","client":1,"op":"get","key":"a","call_ns":5,"ret_ns":1,"status":"fail"}"#,
            "before call_ns",
        ),
        (
            r#"{"service":"btree","client":1,"op":"read","key":1,"call_ns":0,"ret_ns":1,"status":"fail"}"#,
            "service `btree` in a kv history",
        ),
        (r#"{"service":"kv","client":1"#, "EOF"),
    ];
    for (line, want) in bad {
        let text = format!("{good}\n\n{line}\n{good}\n");
        let err = read_kv_history_from(text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains(want), "{err} should mention {want}");
    }
    // Unknown extra fields are annotations.
    let annotated = good.replace("\"client\"", "\"replica\":\"r1\",\"client\"");
    assert_eq!(read_kv_history_from(annotated.as_bytes()).unwrap().len(), 1);
}

#[test]
fn events_round_trip_through_json() {
    let events = vec![
        ok(
            1,
            KvOp::Put {
                key: vec![0xff],
                value: "é".into(),
                prev_kv: true,
            },
            0,
            10,
            KvResult::Put {
                revision: 2,
                prev: Some(None),
            },
        ),
        ok(2, range("a", "\0"), 5, 20, entries(&[("a", "", 2)], 2)),
        info(
            3,
            txn(vec![version_is("a", 0)], vec![put("a", "1")], vec![]),
            7,
            30,
        ),
        fail(3, del("a"), 40, 41),
    ];
    let text: String = events
        .iter()
        .map(|e| e.to_json().to_string() + "\n")
        .collect();
    assert_eq!(read_kv_history_from(text.as_bytes()).unwrap(), events);
}

/// What the store's recorder writes, the checker reads, and a history recorded from the
/// store passes.
#[test]
fn partita_kv_lines_are_read_and_pass() {
    let mut store = KvStore::new();
    let cmds = [
        KvCommand::put("a", "1"),
        KvCommand::put(vec![0xfe, 0xff], vec![0x80]),
        KvCommand::get("a"),
        KvCommand::prefix("a"),
        KvCommand::range("a", "\0"),
        KvCommand::delete_range("a", "b"),
        KvCommand::get(vec![0xfe, 0xff]),
        KvCommand::delete("zz"),
    ];
    let mut text = String::new();
    for (i, cmd) in cmds.iter().enumerate() {
        let (reply, _) = store.execute(cmd);
        let t = 10 * i as u64;
        text += &event_line(1, cmd, t, t + 5, Outcome::Ok(&reply));
        text.push('\n');
    }
    text += &event_line(2, &KvCommand::put("x", "y"), 1, 2, Outcome::Info);
    text.push('\n');
    let events = read_kv_history_from(text.as_bytes()).unwrap();
    assert_eq!(events.len(), cmds.len() + 1);
    assert_eq!(events[2].result, Some(got(Some(("1", 2, 1)), Some(3))));
    partita_checker::kv::check_kv(&events, &Default::default()).unwrap();
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "partita-checker-{}-{name}.jsonl",
        std::process::id()
    ));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    path
}

#[test]
fn the_service_field_chooses_the_checker() {
    let btree = temp_file(
        "btree",
        r#"{"client":1,"op":"insert","key":1,"value":2,"call_ns":0,"ret_ns":1,"status":"ok","result":{"inserted":true}}
{"client":1,"op":"read","key":1,"call_ns":2,"ret_ns":3,"status":"ok","result":{"value":2}}
"#,
    );
    let r = check_history_file(&btree, &CheckOptions::default()).unwrap();
    assert!(matches!(r, ServiceReport::Btree(_)));
    assert!(r.is_linearizable());
    assert_eq!((r.service(), r.events()), ("btree", 2));

    let kv_text = format!(
        "{}\n{}\n",
        ok(1, put("a", "1"), 0, 1, put_r(2)).to_json(),
        ok(1, get("a"), 2, 3, got(None, Some(2))).to_json()
    );
    let kv = temp_file("kv", &kv_text);
    let r = check_history_file(&kv, &CheckOptions::default()).unwrap();
    assert!(matches!(r, ServiceReport::Kv(_)));
    assert!(!r.is_linearizable());
    assert!(r.to_string().starts_with("NOT linearizable: "), "{r}");
    // A preload is a B+tree notion.
    let preload = CheckOptions::with_initial(Initial::Preload {
        count: 4,
        stride: 1,
    });
    let err = check_history_file(&kv, &preload).unwrap_err().to_string();
    assert!(err.contains("key-value history"), "{err}");

    let other = temp_file(
        "other",
        r#"{"service":"chirper","client":1,"op":"post","call_ns":0,"ret_ns":1,"status":"fail"}"#,
    );
    let err = check_history_file(&other, &CheckOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("service `chirper`"), "{err}");

    // A B+tree line inside a key-value history is refused by line.
    let mixed = temp_file(
        "mixed",
        &format!(
            "{kv_text}{}\n",
            r#"{"client":1,"op":"read","key":1,"call_ns":2,"ret_ns":3,"status":"ok","result":{"value":2}}"#
        ),
    );
    let err = format!(
        "{:#}",
        check_history_file(&mixed, &CheckOptions::default()).unwrap_err()
    );
    assert!(err.contains("line 3"), "{err}");
    for p in [btree, kv, other, mixed] {
        let _ = std::fs::remove_file(p);
    }
}
