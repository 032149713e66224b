//! A random mix of key-value commands on a few contended keys, for the tests and the
//! simulator that record histories: puts, gets, ranges over the prefix every key
//! shares, deletes, and transactions that overwrite a key if it exists and read it
//! otherwise. Values name their writer (`c{client}-{n}`), so that a lost or duplicated
//! write shows in the history.

use rand::Rng;

use crate::types::*;

/// Command `n` of client `client`: one of the mix on keys `k0`..`k{keys - 1}`.
pub fn random_command(rng: &mut impl Rng, keys: u64, client: u64, n: u64) -> KvCommand {
    let key = format!("k{}", rng.gen_range(0..keys.max(1)));
    let value = format!("c{client}-{n}");
    match rng.gen_range(0..100) {
        0..35 => KvCommand::put(key, value),
        35..60 => KvCommand::get(key),
        60..70 => KvCommand::prefix("k"),
        70..80 => KvCommand::delete(key),
        _ => overwrite_or_read(key, value),
    }
}

/// Command `n` of client `client` on keys that S-SMR and DS-SMR partition: the mix
/// of [`random_command`] with a quarter of the commands [`both_or_read`] on two keys,
/// so that commands span partitions (and DS-SMR moves keys together).
pub fn random_command_pairs(rng: &mut impl Rng, keys: u64, client: u64, n: u64) -> KvCommand {
    if rng.gen_bool(0.25) {
        let a = rng.gen_range(0..keys.max(2));
        let b = (a + rng.gen_range(1..keys.max(2))) % keys.max(2);
        return both_or_read(format!("k{a}"), format!("k{b}"), format!("c{client}-{n}"));
    }
    random_command(rng, keys, client, n)
}

/// Pair `p`'s keys, `pair/{p}/a` and `pair/{p}/b`.
pub fn pair_keys(p: u64) -> [Vec<u8>; 2] {
    [
        format!("pair/{p}/a").into_bytes(),
        format!("pair/{p}/b").into_bytes(),
    ]
}

/// A transaction that puts `value` at both keys of pair `p` (the pairs workload of
/// the key-value store on S-SMR and DS-SMR: `partita bench --kv-pairs`).
pub fn pair_puts(p: u64, value: impl Into<Vec<u8>>) -> KvCommand {
    let value = value.into();
    KvCommand::Txn(TxnRequest {
        compare: vec![],
        success: pair_keys(p)
            .into_iter()
            .map(|key| {
                RequestOp::Put(PutRequest {
                    key,
                    value: value.clone(),
                    prev_kv: false,
                    lease: 0,
                })
            })
            .collect(),
        failure: vec![],
    })
}

/// If `a` exists, put `value` at `a` and at `b` (distinct keys) in one revision;
/// otherwise read `b`.
pub fn both_or_read(
    a: impl Into<Vec<u8>>,
    b: impl Into<Vec<u8>>,
    value: impl Into<Vec<u8>>,
) -> KvCommand {
    let (a, b, value) = (a.into(), b.into(), value.into());
    let put = |key: &Vec<u8>| {
        RequestOp::Put(PutRequest {
            key: key.clone(),
            value: value.clone(),
            prev_kv: true,
            lease: 0,
        })
    };
    KvCommand::Txn(TxnRequest {
        compare: vec![Compare {
            key: a.clone(),
            op: CompareOp::Greater,
            target: CompareTarget::Version(0),
        }],
        success: vec![put(&a), put(&b)],
        failure: vec![RequestOp::Range(RangeRequest::get(b))],
    })
}

/// If `key` exists (version > 0), put `value` there; otherwise read it.
pub fn overwrite_or_read(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> KvCommand {
    let key = key.into();
    KvCommand::Txn(TxnRequest {
        compare: vec![Compare {
            key: key.clone(),
            op: CompareOp::Greater,
            target: CompareTarget::Version(0),
        }],
        success: vec![RequestOp::Put(PutRequest {
            key: key.clone(),
            value: value.into(),
            prev_kv: false,
            lease: 0,
        })],
        failure: vec![RequestOp::Range(RangeRequest::get(key))],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn the_mix_covers_every_kind_and_passes_the_checks() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut names = std::collections::BTreeSet::new();
        for n in 0..400 {
            let cmd = random_command(&mut rng, 6, 1, n);
            check(&cmd).unwrap();
            names.insert(cmd.name());
        }
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["delete_range", "put", "range", "txn"]
        );
    }
}
