//! A checkpoint from disk (a restart) or from a peer (state transfer): the header and
//! checksum check, then the restore of a replica of every service (the B+tree, the
//! key-value store, the bank, Chirper's S-SMR and DS-SMR members), and a node core
//! recovering from it (which also reads the ordering section). Never a panic: damage is
//! an error; what restores satisfies its invariants and checkpoints back to the same
//! bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_consensus::Protocol;
use partita_dssmr::chirper::Chirper;
use partita_dssmr::client::Scheme;
use partita_node::{NodeCore, UnsafeBugs};
use partita_smr::SequentialReplica;

fuzz_target!(|data: &[u8]| {
    restore(data);
    if let Some(sealed) = partita_fuzz::resealed(data) {
        restore(&sealed);
    }
});

fn restore(data: &[u8]) {
    let header = partita_smr::checkpoint_header(data);
    let verified = partita_smr::verify_checkpoint(data);
    if let Ok(info) = &verified {
        assert_eq!(header.as_ref(), Ok(info), "the header check agrees");
        let _ = partita_smr::checkpoint_ordering(data, info);
    }
    if data.len() >= partita_smr::CHECKPOINT_IDENTITY_BYTES {
        let _ = partita_smr::checkpoint_identity(&data[..partita_smr::CHECKPOINT_IDENTITY_BYTES]);
    }
    if verified.is_err() {
        return;
    }
    sequential::<partita_btree::BPlusTree>(data);
    sequential::<partita_kv::KvStore>(data);
    sequential::<partita_fuzz::bank::Bank>(data);
    let users = partita_fuzz::chirper_users();
    for scheme in [Scheme::Ssmr, Scheme::Dssmr] {
        let f = partita_dssmr::replica::factory::<Chirper>(
            scheme,
            partita_dssmr::StaticMap::Service,
            users.clone(),
        );
        if let Ok(r) = f.restore(data, 1, 4) {
            r.invariants();
        }
    }
    // A node recovering from it: a replica of the B+tree, and a Chirper member.
    for setup in [
        partita_fuzz::setup(
            4,
            Protocol::RingPaxos,
            partita_smr::service::<partita_btree::BPlusTree>(),
        ),
        partita_fuzz::chirper_setup(4, Protocol::MultiPaxos),
    ] {
        let mut out = Vec::new();
        let recovered = NodeCore::recover(
            setup,
            Vec::new(),
            Some(data.to_vec()),
            UnsafeBugs::default(),
            &mut out,
        );
        if let Ok(n) = recovered {
            n.invariants();
        }
    }
}

fn sequential<S: partita_service::StateMachine>(data: &[u8]) {
    if let Ok(r) = SequentialReplica::<S>::restore(data) {
        r.invariants();
        let info = partita_smr::verify_checkpoint(data).expect("restored from it");
        let ordering = partita_smr::checkpoint_ordering(data, &info);
        // Written back, it restores to the same state, and from then on the bytes are a
        // function of the state (a snapshot need not be canonical, so the first
        // rewrite may differ from the input).
        let again = r.checkpoint_with(ordering);
        let r2 = SequentialReplica::<S>::restore(&again).expect("a written checkpoint restores");
        assert_eq!(r2.state().digest(), r.state().digest());
        assert_eq!(r2.last_instance(), r.last_instance());
        assert_eq!(
            r2.checkpoint_with(ordering),
            again,
            "rewritten, the same bytes"
        );
    }
    if let Ok(r) = partita_smr::service::<S>().restore(data, 1, 4) {
        r.invariants();
    }
}
