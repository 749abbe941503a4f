//! Value parsers shared by the commands' arguments.

/// `--record-at`: when a TLS-over-TCP connection's record is written
/// ([`analyzer::RecordAt`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordAt {
    /// Once the handshake (and the client's first use) is timed: lifetime
    /// and bytes after the handshake only if the connection closed first.
    #[default]
    Handshake,
    /// Held until FIN/RST: lifetime and bytes after the handshake filled
    /// (null, with a note `open:<why>`, for one still open at capture end,
    /// idle timeout or eviction).
    Close,
}

impl From<RecordAt> for analyzer::RecordAt {
    fn from(r: RecordAt) -> Self {
        match r {
            RecordAt::Handshake => analyzer::RecordAt::Handshake,
            RecordAt::Close => analyzer::RecordAt::Close,
        }
    }
}

/// `-f/--filter`: a BPF expression (as tcpdump's), compiled once here so
/// that a bad one is one usage error before anything is read. Compiled for
/// Ethernet: an expression only some link types accept (`ether host` on a
/// Linux cooked capture) fails later, on the capture that cannot take it.
pub fn parse_bpf_filter(s: &str) -> Result<String, String> {
    let dead = pcap::Capture::dead(pcap::Linktype::ETHERNET)
        .map_err(|e| format!("libpcap cannot compile filters here: {e}"))?;
    dead.compile(s, true)
        .map_err(|e| format!("bad --filter expression (BPF, as tcpdump takes): {e}"))?;
    Ok(s.to_string())
}

/// A size in bytes: a number with an optional binary suffix (`K`, `M`,
/// `G`, optionally followed by `iB` or `B`), as `--max-memory 256M`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: usize = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 400M, 2G, 65536)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(format!("`{s}`: unknown unit (use K, M or G)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// `live --buffer-size`: a size ([`parse_size`]) from 64 KiB to 1 GiB (the
/// eBPF ring buffer's size is a 32-bit power of two, libpcap's an `int`).
pub fn parse_buffer_size(s: &str) -> Result<usize, String> {
    let n = parse_size(s)?;
    if !(64 << 10..=1 << 30).contains(&n) {
        return Err(format!("`{s}`: the buffer must be between 64K and 1G"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::{parse_bpf_filter, parse_buffer_size, parse_size};

    #[test]
    fn bpf_filters() {
        assert!(parse_bpf_filter("tcp port 443 and host 10.0.0.1").is_ok());
        let bad = parse_bpf_filter("tcp prot 443").unwrap_err();
        assert!(bad.contains("bad --filter expression"), "{bad}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("400M"), Ok(400 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("16kb"), Ok(16 << 10));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("4T").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn buffer_sizes() {
        assert_eq!(parse_buffer_size("64K"), Ok(64 << 10));
        assert_eq!(parse_buffer_size("1G"), Ok(1 << 30));
        let small = parse_buffer_size("4096").unwrap_err();
        assert!(small.contains("between 64K and 1G"), "{small}");
        assert!(parse_buffer_size("2G").is_err());
        assert!(parse_buffer_size("many").is_err());
    }
}
