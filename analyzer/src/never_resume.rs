//! "Which clients never resume": per client fingerprint, the full
//! handshakes that offered nothing and those whose offer was declined,
//! against the resumed ones, and the avoidable latency they cost. Bounded
//! like the server names ([`add_named`]: the
//! rest folded into `(other)`).
//!
//! The fingerprint is `ja4_stable`, not `ja4`: a TLS 1.3 client's resuming
//! hello carries pre_shared_key and its fresh one does not, so by raw JA4
//! every fingerprint resumes 0 % or 100 % and the question has no answer.

use std::collections::BTreeMap;

use crate::aggregate::add_named;
use crate::record::{ConnectionRecord, HandshakeKind};

/// Fingerprints the never-resume table lists, at most.
pub const NEVER_RESUME_ROWS: usize = 10;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientResumption {
    /// Full handshakes whose client offered no resumption.
    pub full_no_offer: u64,
    /// Full handshakes whose client offered resumption (the server declined).
    pub declined: u64,
    pub resumed: u64,
    pub avoidable_ms: f64,
}

impl ClientResumption {
    /// Full handshakes that could have been resumed: offered nothing, or declined.
    pub fn missed(&self) -> u64 {
        self.full_no_offer + self.declined
    }

    /// Resumed share of the completed handshakes counted here.
    pub fn resumption_rate(&self) -> Option<f64> {
        let done = self.missed() + self.resumed;
        (done > 0).then(|| self.resumed as f64 / done as f64)
    }

    fn merge(&mut self, o: &ClientResumption) {
        self.full_no_offer += o.full_no_offer;
        self.declined += o.declined;
        self.resumed += o.resumed;
        self.avoidable_ms += o.avoidable_ms;
    }
}

/// Resumption by client fingerprint, over the records that have one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ByClient {
    /// Keyed by `ja4_stable`.
    pub by_client: BTreeMap<String, ClientResumption>,
    /// Avoidable latency of every record (with a fingerprint or not): the
    /// denominator of each fingerprint's share.
    pub total_avoidable_ms: f64,
}

impl ByClient {
    pub fn add(&mut self, r: &ConnectionRecord) {
        let avoidable = r.timing.avoidable.unwrap_or(0.0);
        self.total_avoidable_ms += avoidable;
        let Some(fp) = r.ja4_stable.as_deref() else {
            return;
        };
        let mut one = ClientResumption {
            avoidable_ms: avoidable,
            ..Default::default()
        };
        match r.handshake {
            Some(HandshakeKind::Full) => {
                if r.offered.as_ref().is_some_and(|o| !o.is_empty()) {
                    one.declined = 1;
                } else if r.offered.is_some() {
                    one.full_no_offer = 1;
                }
            }
            Some(HandshakeKind::Resumed) => one.resumed = 1,
            _ => {}
        }
        add_named(&mut self.by_client, fp, |c| c.merge(&one));
    }

    /// Up to [`NEVER_RESUME_ROWS`] fingerprints with the most missed
    /// resumptions (descending, then by fingerprint); empty if none missed one.
    pub fn never_resume(&self) -> Vec<(&str, &ClientResumption)> {
        let mut rows: Vec<(&str, &ClientResumption)> = self
            .by_client
            .iter()
            .filter(|(_, c)| c.missed() > 0)
            .map(|(k, c)| (k.as_str(), c))
            .collect();
        rows.sort_by(|a, b| b.1.missed().cmp(&a.1.missed()).then(a.0.cmp(b.0)));
        rows.truncate(NEVER_RESUME_ROWS);
        rows
    }

    /// A fingerprint's share of all avoidable latency (0..=1).
    pub fn share(&self, c: &ClientResumption) -> Option<f64> {
        (self.total_avoidable_ms > 0.0).then(|| c.avoidable_ms / self.total_avoidable_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::*;

    fn rec(
        stable: Option<&str>,
        kind: HandshakeKind,
        offered: Option<Vec<Resumption>>,
        avoidable: f64,
    ) -> ConnectionRecord {
        ConnectionRecord {
            offered,
            timing: Timing {
                avoidable: (avoidable > 0.0).then_some(avoidable),
                ..Timing::default()
            },
            ja4_stable: stable.map(Into::into),
            ..ConnectionRecord::sample(kind)
        }
    }

    #[test]
    fn missed_resumptions_by_fingerprint() {
        let mut b = ByClient::default();
        let none = Some(vec![]);
        let psk = Some(vec![Resumption::Psk]);
        for r in [
            rec(Some("a"), HandshakeKind::Full, none.clone(), 0.0),
            rec(Some("a"), HandshakeKind::Full, none.clone(), 0.0),
            rec(Some("b"), HandshakeKind::Full, psk.clone(), 30.0),
            rec(Some("b"), HandshakeKind::Resumed, psk.clone(), 0.0),
            rec(Some("c"), HandshakeKind::Resumed, psk.clone(), 0.0),
            // Offer not visible: not counted as "offered nothing".
            rec(Some("d"), HandshakeKind::Full, None, 0.0),
            rec(None, HandshakeKind::Full, psk.clone(), 10.0),
        ] {
            b.add(&r);
        }
        let rows = b.never_resume();
        let keys: Vec<&str> = rows.iter().map(|r| r.0).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(rows[0].1.full_no_offer, 2);
        assert_eq!(rows[0].1.resumption_rate(), Some(0.0));
        assert_eq!(rows[1].1.declined, 1);
        assert_eq!(rows[1].1.resumed, 1);
        assert_eq!(b.share(rows[1].1), Some(0.75));
        assert!(ByClient::default().never_resume().is_empty());
    }

    /// Regression: by raw JA4, curl's fresh hellos (no pre_shared_key)
    /// and its resuming ones were two clients, one "never resuming".
    #[test]
    fn fresh_and_resuming_hellos_are_one_client() {
        let mut b = ByClient::default();
        let psk = Some(vec![Resumption::Psk]);
        for (raw, kind, offered) in [
            (
                "t13d0411h1_16476d049b0b_303c7117418d",
                HandshakeKind::Full,
                Some(vec![]),
            ),
            (
                "t13d0412h1_16476d049b0b_622f681f1a22",
                HandshakeKind::Resumed,
                psk.clone(),
            ),
            (
                "t13d0412h1_16476d049b0b_622f681f1a22",
                HandshakeKind::Resumed,
                psk,
            ),
        ] {
            b.add(&ConnectionRecord {
                ja4: Some(raw.into()),
                ..rec(
                    Some("t13d0411h1_16476d049b0b_303c7117418d"),
                    kind,
                    offered,
                    0.0,
                )
            });
        }
        let rows = b.never_resume();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].0, "t13d0411h1_16476d049b0b_303c7117418d");
        assert_eq!(rows[0].1.full_no_offer, 1);
        assert_eq!(rows[0].1.resumed, 2);
    }
}
