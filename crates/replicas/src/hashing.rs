//! Where an Application belongs: its shard (a stable hash of `namespace/name`) and each shard's
//! replica (rendezvous hashing over the live replicas: every replica computes the same answer from
//! the same member list, and a replica joining or leaving moves only the shards it gains or had).
//!
//! The hash is FNV-1a (a fixed, published algorithm: replicas of different Capstan versions agree
//! during an upgrade, which `std`'s hasher does not promise) followed by a 64-bit finaliser that
//! spreads similar inputs (`r1`, `r2`) over the whole range.

use std::hash::Hasher;

use crate::identity::ReplicaId;

/// How many shards the Applications are spread over. Fixed: every replica must agree on it. 32
/// keeps the spread even for up to ~10 replicas and costs one small Lease each.
pub const SHARDS: u16 = 32;

fn hash(parts: &[&str]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            h.write_u8(b'/');
        }
        h.write(part.as_bytes());
    }
    // splitmix64's finaliser.
    let mut z = h.finish();
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The shard of the Application `name` in `namespace`.
pub fn shard_of(namespace: &str, name: &str) -> u16 {
    (hash(&[namespace, name]) % u64::from(SHARDS)) as u16
}

/// The replica `shard` belongs to among `members` (none when there are none).
pub fn owner_of<'a>(shard: u16, members: impl IntoIterator<Item = &'a ReplicaId>) -> Option<&'a ReplicaId> {
    let shard = shard.to_string();
    members
        .into_iter()
        .max_by_key(|m| (hash(&[&shard, m.as_str()]), m.as_str().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<ReplicaId> {
        names.iter().map(|n| ReplicaId::new(n).expect("an id")).collect()
    }

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(shard_of("capstan", "web"), shard_of("capstan", "web"));
        let mut counts = vec![0u32; SHARDS as usize];
        for i in 0..10_000 {
            counts[shard_of("capstan", &format!("app-{i}")) as usize] += 1;
        }
        // 312.5 each on average.
        assert!(counts.iter().all(|c| (230..400).contains(c)), "{counts:?}");
    }

    #[test]
    fn a_replica_leaving_moves_only_its_shards() {
        let three = ids(&["capstan-controller-0", "capstan-controller-1", "capstan-controller-2"]);
        let two = &three[..2];
        let mut per = [0u32; 3];
        for shard in 0..SHARDS {
            let before = owner_of(shard, &three).expect("an owner");
            per[three.iter().position(|m| m == before).expect("a member")] += 1;
            let after = owner_of(shard, two).expect("an owner");
            if before.as_str() != "capstan-controller-2" {
                assert_eq!(before, after, "shard {shard} moved between staying replicas");
            }
        }
        assert!(per.iter().all(|c| (6..=16).contains(c)), "{per:?}");
        assert_eq!(owner_of(0, &[]), None);
    }
}
