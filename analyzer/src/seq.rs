//! TCP sequence numbers (RFC 9293 §3.4): 32 bits that wrap, compared by
//! their signed distance (RFC 1982), never with `<` on the raw numbers.
//!
//! ```
//! use analyzer::seq::Seq;
//! assert!(Seq(5) > Seq(u32::MAX - 5)); // 5 is 11 bytes after, across the wrap
//! assert_eq!(Seq(5).diff(Seq(u32::MAX - 5)), 11);
//! ```

use std::cmp::Ordering;

/// A sequence number; ordered by wrapping distance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Seq(pub u32);

impl Seq {
    /// `self - other` in sequence space, as a signed distance.
    pub fn diff(self, other: Seq) -> i64 {
        seq_diff(self.0, other.0)
    }
}

impl PartialOrd for Seq {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

/// `a - b` in sequence space, as a signed distance.
pub fn seq_diff(a: u32, b: u32) -> i64 {
    a.wrapping_sub(b) as i32 as i64
}
