//! Deterministic identifiers: uids and `generateName` suffixes, drawn from a seeded RNG
//! (splitmix64) so that runs with the same seed produce the same names.

use super::state::Store;

impl Store {
    fn rand(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn new_uid(&mut self) -> String {
        let a = self.rand();
        let b = self.rand();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    pub(super) fn random_suffix(&mut self) -> String {
        const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut x = self.rand();
        (0..5)
            .map(|_| {
                let c = ALPHA[(x % ALPHA.len() as u64) as usize] as char;
                x /= ALPHA.len() as u64;
                c
            })
            .collect()
    }
}
