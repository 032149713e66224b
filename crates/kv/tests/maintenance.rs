//! etcd's maintenance reads on the store: HashKV at a revision (equal for equal
//! histories, the same later for a past revision), Hash of the whole store, the size,
//! and the snapshot command.

use partita_kv::{HashRequest, KvCommand, KvError, KvReply, KvStore};

fn hash(s: &mut KvStore, revision: u64, store: bool) -> Result<(u32, u64), KvError> {
    let cmd = KvCommand::Hash(HashRequest { revision, store });
    partita_kv::check(&cmd).unwrap();
    match s.execute(&cmd).0 {
        KvReply::Hash(h) => Ok((h.hash, h.size)),
        KvReply::Error(e) => Err(e.error),
        other => panic!("{other:?}"),
    }
}

#[test]
fn hashkv_is_a_function_of_the_history_up_to_its_revision() {
    let mut a = KvStore::new();
    let mut b = KvStore::new();
    for s in [&mut a, &mut b] {
        s.execute(&KvCommand::put("x", "1"));
        s.execute(&KvCommand::put("y", "1"));
    }
    let at3 = hash(&mut a, 0, false).unwrap();
    assert_eq!(
        at3,
        hash(&mut b, 3, false).unwrap(),
        "equal histories, equal hashes"
    );
    a.execute(&KvCommand::put("x", "2"));
    a.execute(&KvCommand::delete("y"));
    assert_eq!(
        hash(&mut a, 3, false).unwrap().0,
        at3.0,
        "revision 3 hashes alike later"
    );
    assert_ne!(hash(&mut a, 0, false).unwrap().0, at3.0);
    // The same keys by another history: another hash (the history is hashed too).
    b.execute(&KvCommand::put("x", "2"));
    b.execute(&KvCommand::put("y", "1"));
    b.execute(&KvCommand::delete("y"));
    assert_ne!(
        hash(&mut b, 0, false).unwrap().0,
        hash(&mut a, 0, false).unwrap().0
    );
    assert_eq!(hash(&mut a, 9, false), Err(KvError::FutureRevision(5)));
    a.execute(&KvCommand::Compact(partita_kv::CompactRequest {
        revision: 4,
    }));
    assert_eq!(hash(&mut a, 3, false), Err(KvError::Compacted(4)));
    // The whole store: its snapshot's CRC and size.
    let (h, size) = hash(&mut a, 0, true).unwrap();
    let snap = a.snapshot();
    assert_eq!((h, size), (crc32c::crc32c(&snap), snap.len() as u64));
    assert_eq!(
        hash(&mut a, 0, false).unwrap().1,
        snap.len() as u64,
        "counted, not written"
    );
    assert!(partita_kv::check(&KvCommand::Hash(HashRequest {
        revision: 3,
        store: true
    }))
    .is_err());
}
