//! FNV-1a: the one hash function of names and template hashes (a leaf: everything that
//! hashes uses it, it uses nothing).

/// FNV-1a over `parts` (each followed by a 0 byte): stable across releases and platforms,
/// unlike std's hasher, so a restarted operator computes the same hashes.
pub fn fnv1a<'p>(parts: impl IntoIterator<Item = &'p [u8]>) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().copied().chain(std::iter::once(0)) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}
