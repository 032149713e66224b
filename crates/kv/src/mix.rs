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
