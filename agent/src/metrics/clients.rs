//! The bound on the `ja4_stable` label: client fingerprints (the records'
//! `ja4_stable`, one per client rather than one per fresh or resuming
//! hello) get series of their
//! own only once a heavy-hitters sketch shows they are among the busiest.
//!
//! A Space-Saving sketch ([`super::heavy`]) with `K = SKETCH_PER_LABEL × N`
//! counters sees every record's fingerprint. A fingerprint is admitted —
//! its own label value, for
//! good: series never vanish — when, with fewer than N admitted, its
//! certain count is at least [`MIN_ADMIT`], exceeds `M / K` (M: the
//! fingerprints seen so far, so the fingerprint made more than a 1/K share
//! of them), and ranks among the N largest certain counts in the sketch.
//! Everything else is `other`, a record without a fingerprint `none`. A
//! fingerprint seen once has a certain count of 1 wherever the sketch put
//! it, so a flood of one-off fingerprints never takes a slot, however long;
//! it only raises `M / K`, which a steady client outgrows.
//!
//! Handshakes a fingerprint made before its admission stay in `other`
//! (counters do not move between series).

use std::collections::HashSet;
use std::sync::Arc;

use analyzer::client_names::ClientNames;

use super::heavy::SpaceSaving;
use super::labels::{NONE, OTHER};

/// Sketch counters per admitted label value (`K = SKETCH_PER_LABEL × N`).
pub const SKETCH_PER_LABEL: usize = 4;
/// Handshakes a fingerprint must certainly have made to be admitted.
pub const MIN_ADMIT: u64 = 2;

/// Bounds the `ja4_stable` label to the top N fingerprints by volume, plus
/// `other` and `none`.
pub struct ClientFingerprints {
    top: usize,
    /// Handed out shared: a record costs no copy of its label value.
    admitted: HashSet<Arc<str>, foldhash::fast::RandomState>,
    /// The shared `none` and `other` values.
    none: Arc<str>,
    other: Arc<str>,
    sketch: SpaceSaving,
    /// `--ja4-names`: the `client` label beside an admitted `ja4_stable` (one
    /// name per fingerprint, so it adds no series).
    names: Option<Arc<ClientNames>>,
}

impl ClientFingerprints {
    pub fn new(top: usize) -> Self {
        ClientFingerprints {
            top,
            admitted: HashSet::default(),
            none: Arc::from(NONE),
            other: Arc::from(OTHER),
            sketch: SpaceSaving::new(top * SKETCH_PER_LABEL),
            names: None,
        }
    }

    pub fn with_names(mut self, names: Option<Arc<ClientNames>>) -> Self {
        self.names = names;
        self
    }

    /// The `client` label for a `ja4_stable` label value: its name, or empty.
    pub fn name(&self, label: &str) -> String {
        self.names
            .as_ref()
            .and_then(|n| n.get(label))
            .unwrap_or_default()
            .to_string()
    }

    /// The label value for a record's fingerprint.
    pub fn label(&mut self, ja4: Option<&str>) -> Arc<str> {
        let Some(ja4) = ja4 else {
            return Arc::clone(&self.none);
        };
        if self.admitted.len() >= self.top {
            // Every slot is taken for good: the sketch has nothing to decide.
            return Arc::clone(self.admitted.get(ja4).unwrap_or(&self.other));
        }
        // The sketch sees the admitted too: ranks and shares are of all
        // handshakes with a fingerprint.
        let certain = self.sketch.count(ja4).unwrap_or(0);
        if let Some(value) = self.admitted.get(ja4) {
            return Arc::clone(value);
        }
        if self.sketch.is_heavy(certain, MIN_ADMIT) && self.sketch.ranked_above(certain) < self.top
        {
            let value: Arc<str> = Arc::from(ja4);
            self.admitted.insert(Arc::clone(&value));
            return value;
        }
        Arc::clone(&self.other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_needs_two_handshakes_and_stays() {
        let mut c = ClientFingerprints::new(2);
        assert_eq!(&*c.label(None), "none");
        assert_eq!(&*c.label(Some("a")), "other");
        assert_eq!(&*c.label(Some("a")), "a");
        assert_eq!(&*c.label(Some("b")), "other");
        assert_eq!(&*c.label(Some("b")), "b");
        // Both slots are taken: c never gets in, a and b stay.
        for _ in 0..10 {
            assert_eq!(&*c.label(Some("c")), "other");
        }
        assert_eq!(&*c.label(Some("a")), "a");
        assert_eq!(&*ClientFingerprints::new(0).label(Some("a")), "other");
    }

    /// Once the sketch is full, a returning fingerprint's certain count
    /// starts again at 1: one-offs that took over a counter never qualify.
    #[test]
    fn one_offs_never_qualify_once_the_sketch_is_full() {
        let mut c = ClientFingerprints::new(1);
        for i in 0..1000 {
            assert_eq!(&*c.label(Some(&format!("x{i}"))), "other");
        }
        assert!(c.sketch.all_certain().iter().all(|&n| n == 1));
        assert!(c.admitted.is_empty());
    }
}
